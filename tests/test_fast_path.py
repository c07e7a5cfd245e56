"""The hot path of a program as one generated function (:func:`amk.runtime.straight_line`): each step gets the
values the plans name, in order, with its fresh outputs, views and workspace."""

import torch

from amk.runtime import straight_line


def allocate(shape, strides, dtype):
    return torch.full(shape, -1.0, dtype=dtype).as_strided(shape, strides)


def test_each_step_gets_its_operands_fresh_outputs_views_and_workspace():
    calls = []

    def matmul(a, b):  # an op run in PyTorch: returns its result
        calls.append("matmul")
        return a @ b

    def add_scaled(x, bias, out, scratch):  # a launch: writes its output, takes its workspace last
        calls.append(("add", x.shape, out.shape, out.dtype, scratch.shape))
        out.copy_(x + bias.reshape(1, -1) * scratch.sum())

    scratch = torch.full((3,), 1.0)

    class Workspace:  # amk.workspace.Workspace's interface: called, it gives the launch's buffers
        def __call__(self):
            return [scratch]

    flat = [None, lambda bias: bias.reshape(-1), None]  # the launch views its bias flat
    plans = [(matmul, [0, 1], [3], None, None, None),
             (add_scaled, [3, 2], [4], [((2, 2), (2, 1), torch.float32)], Workspace(), flat)]
    run = straight_line(plans, [0, 1, 2], [4, 0], allocate)

    a, b, bias = torch.ones(2, 4), torch.ones(4, 2), torch.tensor([[1.0, 2.0]])
    out, same = run([a, b, bias])
    assert calls == ["matmul", ("add", (2, 2), (2, 2), torch.float32, (3,))]
    assert torch.equal(out, torch.tensor([[7.0, 10.0], [7.0, 10.0]]))  # 4 + bias x 3
    assert same is a
    assert run([a, b, bias])[0] is not out  # every call allocates its own outputs


def test_a_program_of_one_launch_on_its_arguments():
    def double(x, out):
        out.copy_(2 * x)

    run = straight_line([(double, [7], [8], [((3,), (1,), torch.float64)], None, None)], [7], [8], allocate)
    assert torch.equal(run([torch.arange(3.0, dtype=torch.float64)])[0], torch.tensor([0.0, 2.0, 4.0],
                                                                                       dtype=torch.float64))


def test_operands_read_a_calls_arguments_by_position_and_take_constants_as_they_are():
    """A compiled graph's call passes sizes and other tensors beside the program's: ``operands`` picks the program's
    arguments out of the call's by position, a constant tensor stands for itself, and the results come as a tuple."""
    def scaled_sum(x, y, scale, out):
        out.copy_((x + y) * scale)

    plans = [(scaled_sum, [0, 1, 2], [3], [((2,), (1,), torch.float32)], None, None)]
    scale = torch.tensor([3.0])
    run = straight_line(plans, [0, 1, 2], [3, 1], allocate, operands=[2, 0, scale])
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])
    out, second = run((y, 5, x))  # the call: y, a size, x
    assert torch.equal(out, torch.tensor([33.0, 66.0]))
    assert second is y
    assert isinstance(run((y, 7, x)), tuple)
