"""A call's outputs: Inductor's allocation on the current GPU, the portable one elsewhere.

Without a GPU the choice is checked with stand-ins for the two allocations and the current device; on a GPU the real
allocations are checked (shape, strides, dtype, device), on a second device too where there is one.
"""

from __future__ import annotations

import pytest
import torch

from amk.workspace import contiguous_strides, output_allocator


@pytest.mark.parametrize(("shape", "strides"), [((4, 6), (6, 1)), ((2, 3, 5), (15, 5, 1)), ((7,), (1,)),
                                                ((0, 3), (3, 1)), ((3, 0, 2), (2, 2, 1))])
def test_contiguous_strides_are_pytorchs(shape, strides):
    assert contiguous_strides(shape) == strides == torch.empty(shape).stride()


def test_on_the_cpu_outputs_are_plain_tensors():
    allocate = output_allocator(torch.device("cpu"))
    out = allocate((3, 4), (4, 1), torch.float16)
    assert out.shape == (3, 4) and out.stride() == (4, 1) and out.dtype == torch.float16 and out.device.type == "cpu"


@pytest.mark.parametrize(("current", "expected"), [(1, "inductor's"), (0, "portable")])
def test_on_a_gpu_inductors_allocation_serves_only_its_own_device(monkeypatch, current, expected):
    calls = []
    monkeypatch.setattr(torch._C._dynamo.guards, "_empty_strided_cuda",
                        lambda shape, strides, dtype: calls.append("inductor's") or torch.empty(shape, dtype=dtype),
                        raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: current, raising=False)
    monkeypatch.setattr(torch, "empty_strided",
                        lambda shape, strides, dtype, device: calls.append("portable") or torch.empty(shape, dtype=dtype))
    allocate = output_allocator(torch.device("cuda", 1))
    assert allocate((2, 5), (5, 1), torch.float32).shape == (2, 5)
    assert calls == [expected]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU allocations need a GPU")
def test_gpu_outputs_land_on_the_programs_device():
    for index in range(min(torch.cuda.device_count(), 2)):
        device = torch.device("cuda", index)
        out = output_allocator(device)((3, 4), (4, 1), torch.bfloat16)
        assert out.device == device and out.stride() == (4, 1) and out.dtype == torch.bfloat16
