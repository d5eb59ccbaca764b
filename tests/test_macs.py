import pytest
import torch
from torch import nn

from routing_rl.core.macs import MacCounter, layer_macs


def count(module: nn.Module, x: torch.Tensor) -> int:
    with MacCounter(module) as counter:
        module(x)
    return counter.macs


def test_conv2d_is_h_w_9_cin_cout():
    conv = nn.Conv2d(3, 5, 3, padding=1)
    assert count(conv, torch.zeros(4, 3, 7, 6)) == 7 * 6 * 9 * 3 * 5


def test_conv_counts_output_positions_groups_and_other_ranks():
    assert count(nn.Conv2d(4, 8, 3, stride=2), torch.zeros(2, 4, 9, 9)) == 4 * 4 * 9 * 4 * 8
    assert count(nn.Conv2d(4, 8, 3, padding=1, groups=4), torch.zeros(1, 4, 5, 5)) == 25 * 9 * 1 * 8
    assert count(nn.Conv1d(2, 3, 5), torch.zeros(1, 2, 10)) == 6 * 5 * 2 * 3
    assert count(nn.Conv3d(2, 3, 3, padding=1), torch.zeros(1, 2, 4, 5, 6)) == 4 * 5 * 6 * 27 * 2 * 3


def test_linear_is_nin_nout_per_position():
    assert count(nn.Linear(10, 7), torch.zeros(5, 10)) == 70
    assert count(nn.Linear(10, 7), torch.zeros(5, 3, 10)) == 3 * 70


def test_pooling_batchnorm_relu_and_biases_are_free():
    module = nn.Sequential(nn.Conv2d(2, 2, 1, bias=True), nn.BatchNorm2d(2), nn.ReLU(), nn.MaxPool2d(2), nn.AvgPool2d(2))
    assert count(module, torch.zeros(3, 2, 8, 8)) == 64 * 2 * 2


def test_counts_are_per_example_whatever_the_batch():
    conv = nn.Conv2d(3, 4, 3)
    assert count(conv, torch.zeros(1, 3, 8, 8)) == count(conv, torch.zeros(9, 3, 8, 8))


def test_extra_macs_declares_other_work():
    class Attention(nn.Module):
        def extra_macs(self, inputs, output):
            tokens, dim = inputs[0].shape[1:]
            return 2 * tokens * tokens * dim

        def forward(self, x):
            return x @ x.transpose(1, 2) @ x

    assert count(Attention(), torch.zeros(2, 5, 4)) == 2 * 25 * 4


def test_counter_removes_its_hooks():
    conv = nn.Conv2d(1, 1, 3)
    with MacCounter(conv):
        pass
    assert not conv._forward_hooks


def test_layer_macs_rejects_unknown_layers():
    with pytest.raises(TypeError, match="no MAC rule"):
        layer_macs(nn.ReLU(), torch.zeros(1, 2))


def test_transposed_convolutions_spread_every_input_element_over_a_kernel_of_each_output_channel():
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert count(conv, torch.zeros(2, 4, 5, 5)) == 4 * 25 * 9 * 3


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_counts_its_projections_scores_and_weighted_sum(batch_first):
    from torch.utils.flop_counter import FlopCounterMode

    attention = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=6, vdim=4)
    shape = (lambda length, features: (3, length, features)) if batch_first else (lambda length, features: (length, 3, features))
    query, key, value = torch.randn(shape(5, 8)), torch.randn(shape(7, 6)), torch.randn(shape(7, 4))
    expected = 5 * 8 * 8 + 7 * (6 + 4) * 8 + 5 * 8 * 8 + 2 * 5 * 7 * 8
    with MacCounter(attention) as counter:
        attention(query, key, value)
    with FlopCounterMode(display=False) as flops:  # need_weights: the matmul path, which FlopCounterMode counts
        attention(query, key, value, need_weights=True)
    assert counter.macs == expected == flops.get_total_flops() // 2 // 3
