import pytest
import torch

from specrej.engine.budget import format_size, kv_bytes_per_token, parse_size, token_capacity


@pytest.mark.parametrize("text, expected", [("2GiB", 2 * 2**30), ("512MiB", 512 * 2**20), ("1.5GB", 1_500_000_000),
                                            ("1000", 1000), (" 64 kib ", 65536)])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "2 parsecs", "-1GiB"])
def test_parse_size_rejects_nonsense(text):
    with pytest.raises(ValueError, match="not a memory size"):
        parse_size(text)


def test_kv_bytes_per_token_of_smollm2_in_fp32():
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 dims; K and V; 4 bytes each
    assert kv_bytes_per_token(30, 3, 64, torch.float32) == 2 * 30 * 3 * 64 * 4 == 46080


def test_token_capacity_leaves_the_prompt_and_one_layer_of_headroom():
    kvb = 100
    assert token_capacity(budget_bytes=kvb * 1010, kv_bytes=kvb, prompt_tokens=10, num_layers=9) == 900
    assert token_capacity(budget_bytes=kvb * 5, kv_bytes=kvb, prompt_tokens=10, num_layers=9) == 0


def test_format_size():
    assert format_size(3 * 2**30) == "3.0 GiB" and format_size(12) == "12 B"
