"""analysis.settings: the configuration key, its order and its names."""

import math

from analysis.settings import (
    canonical_setting,
    configuration_order,
    distinct_labels,
    natural_key,
    point_label,
    setting_params,
)


def test_canonical_setting_is_order_free_and_round_trips():
    text = canonical_setting({"min_tokens": 8, "alpha": 0.5, "decision_tokens": [16, 32], "batch_size": None})
    assert text == '{"alpha":0.5,"batch_size":null,"decision_tokens":[16,32],"min_tokens":8}'
    assert canonical_setting({"batch_size": None, "decision_tokens": [16, 32], "alpha": 0.5, "min_tokens": 8}) == text
    assert setting_params(text)["decision_tokens"] == [16, 32]
    assert setting_params(math.nan) == {} and setting_params("") == {}


def test_order_best_of_n_by_n_then_methods_by_name_then_labels_by_their_numbers():
    configs = [(False, "sr", 64, "SR α=0.9", "b"), (True, "bon", 128, "Bo128", "x"),
               (False, "first-k", math.nan, "First 10 of 12", "c"), (False, "sr", 64, "SR α=0.5", "a"),
               (True, "bon", 8, "Bo8", "y"), (False, "first-k", math.nan, "First 2 of 3", "d"),
               (False, "sr-adaptive", 64, "SR δ=0.1", "e"), (False, "sr-adaptive", 64, "SR δ=1e-05", "f")]
    ordered = sorted(configs, key=lambda c: configuration_order(*c))
    assert [label for _, _, _, label, _ in ordered] == [
        "Bo8", "Bo128", "First 2 of 3", "First 10 of 12", "SR α=0.5", "SR α=0.9", "SR δ=1e-05", "SR δ=0.1"]
    assert natural_key("SR δ=0.05") < natural_key("SR δ=0.1")


def test_shared_labels_are_told_apart_by_what_differs():
    configs = [("sr", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5"), ("sr", '{"alpha":0.5,"min_tokens":16}', "SR α=0.5"),
               ("other", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5"), ("sr", '{"alpha":0.9}', "SR α=0.9"),
               ("sr", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5")]  # the same configuration again: the same name
    assert distinct_labels(configs) == [
        "SR α=0.5 (method=sr, min_tokens=8)", "SR α=0.5 (method=sr, min_tokens=16)",
        "SR α=0.5 (method=other, min_tokens=8)", "SR α=0.9", "SR α=0.5 (method=sr, min_tokens=8)"]


def test_point_labels_drop_what_the_methods_labels_share():
    assert point_label("SR α=0.5", "SR") == "α=0.5" and point_label("Random SR α=0.5", "Random SR") == "α=0.5"
    assert point_label("Bo120", "Best-of-N", ["Bo8", "Bo120"]) == "120"  # a letter prefix before every number
    assert point_label("First 2 of 3", "first-k") == "First 2 of 3"
    assert point_label("Something else", "SR") == "Something else"
    labels = ["ST-BoN N=32", "ST-BoN N=128"]
    assert point_label("ST-BoN N=32", "st-bon", labels) == "N=32"  # the words before a last name=value
    # no shared words, or a last word that is not name=value: whole labels
    assert point_label("A x=1", "mix", ["A x=1", "B x=2"]) == "A x=1"
