"""analysis.settings: the configuration key, its order and its names."""

import math

from analysis.settings import (
    canonical_setting,
    configuration_order,
    distinct_labels,
    method_name,
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
    configs = [("sr", 64, "SR α=0.9", "b"), ("bon", 128, "Bo128", "x"), ("first-k", math.nan, "First 10 of 12", "c"),
               ("sr", 64, "SR α=0.5", "a"), ("bon", 8, "Bo8", "y"), ("first-k", math.nan, "First 2 of 3", "d"),
               ("sr-adaptive", 64, "SR δ=0.1", "e"), ("sr-adaptive", 64, "SR δ=1e-05", "f")]
    ordered = sorted(configs, key=lambda c: configuration_order(*c))
    assert [label for _, _, label, _ in ordered] == [
        "Bo8", "Bo128", "First 2 of 3", "First 10 of 12", "SR α=0.5", "SR α=0.9", "SR δ=1e-05", "SR δ=0.1"]
    assert natural_key("SR δ=0.05") < natural_key("SR δ=0.1")


def test_shared_labels_are_told_apart_by_what_differs():
    configs = [("sr", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5"), ("sr", '{"alpha":0.5,"min_tokens":16}', "SR α=0.5"),
               ("other", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5"), ("sr", '{"alpha":0.9}', "SR α=0.9"),
               ("sr", '{"alpha":0.5,"min_tokens":8}', "SR α=0.5")]  # the same configuration again: the same name
    assert distinct_labels(configs) == [
        "SR α=0.5 (method=sr, min_tokens=8)", "SR α=0.5 (method=sr, min_tokens=16)",
        "SR α=0.5 (method=other, min_tokens=8)", "SR α=0.9", "SR α=0.5 (method=sr, min_tokens=8)"]


def test_display_names():
    assert [method_name(m) for m in ("bon", "sr", "sr-adaptive", "sr-random", "first-k")] == [
        "Best-of-N", "SR", "SR adaptive", "Random SR", "first-k"]
    assert point_label("sr", "SR α=0.5") == "α=0.5" and point_label("sr-random", "Random SR α=0.5") == "α=0.5"
    assert point_label("bon", "Bo120") == "120" and point_label("first-k", "First 2 of 3") == "First 2 of 3"
    assert point_label("sr", "Something else") == "Something else"


def test_a_method_outside_the_table_is_named_by_what_its_labels_share():
    labels = ["ST-BoN N=32", "ST-BoN N=128"]
    assert method_name("st-bon", labels) == "ST-BoN" and point_label("st-bon", "ST-BoN N=32", labels) == "N=32"
    assert method_name("st-bon", ["ST-BoN N=32"]) == "ST-BoN"  # one setting: its words before the last
    # no shared words, or a last word that is not name=value: the name, and whole labels
    assert method_name("mix", ["A x=1", "B x=2"]) == "mix" and point_label("mix", "A x=1", ["A x=1", "B x=2"]) == "A x=1"
    assert method_name("first-k", ["First 2 of 3"]) == "first-k"
