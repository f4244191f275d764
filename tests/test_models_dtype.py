"""`--dtype auto`: which dtype each role gets on which device."""

import pytest
import torch

from specrej.errors import SpecrejError
from specrej.models import loading as models

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.mark.parametrize("native, generator, scorer", [(True, torch.bfloat16, torch.float32),
                                                        (False, torch.float32, torch.float32)])
def test_auto_on_cpu_follows_native_bf16_matmul_for_the_generator_only(monkeypatch, native, generator, scorer):
    monkeypatch.setattr(models, "cpu_has_native_bfloat16", lambda: native)
    assert models.resolve_dtype("auto", CPU) == generator
    assert models.resolve_dtype("auto", CPU, cpu_bfloat16=False) == scorer  # reward models, the judge


def test_auto_on_cuda_is_bfloat16_and_explicit_dtypes_win(monkeypatch):
    monkeypatch.setattr(models, "cpu_has_native_bfloat16", lambda: False)
    assert models.resolve_dtype("auto", CUDA) == torch.bfloat16
    assert models.resolve_dtype("auto", CUDA, cpu_bfloat16=False) == torch.bfloat16
    assert models.resolve_dtype("float32", CPU) == torch.float32
    assert models.resolve_dtype("bfloat16", CPU) == torch.bfloat16
    with pytest.raises(SpecrejError, match="unknown dtype 'half'"):
        models.resolve_dtype("half", CPU)


def test_generator_and_reward_model_loaders_pass_their_role(monkeypatch, generator_dir, reward_model_dir):
    monkeypatch.setattr(models, "cpu_has_native_bfloat16", lambda: True)
    model, _ = models.load_generator(str(generator_dir), device="cpu")
    assert model.dtype == torch.bfloat16
    reward, _ = models.load_reward_model(str(reward_model_dir), device="cpu")
    assert reward.dtype == torch.float32


def test_the_probe_reads_torchs_cpu_capabilities(monkeypatch):
    monkeypatch.undo()  # the conftest fixture replaced the probe; this test checks the real one
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert models.cpu_has_native_bfloat16()
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert not models.cpu_has_native_bfloat16()
