"""serve.nn.functional: PyTorch's `torch.nn.functional` (`import serve.nn.functional as F`).

The operations live in one file per family (activation, linear, conv, pooling, normalization, ...);
this namespace re-exports them under PyTorch's names.
"""

from serve.nn.functional.activation import (
    celu,
    celu_,
    elu,
    elu_,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    hardtanh_,
    leaky_relu,
    leaky_relu_,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    relu_,
    selu,
    selu_,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
    threshold,
    threshold_,
)
from serve.nn.functional.attention import multi_head_attention_forward, scaled_dot_product_attention
from serve.nn.functional.conv import conv1d, conv2d, conv_transpose1d, conv_transpose2d, fold, unfold
from serve.nn.functional.dropout import dropout, dropout1d, dropout2d, dropout3d
from serve.nn.functional.linear import bilinear, linear
from serve.nn.functional.loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from serve.nn.functional.normalization import batch_norm, group_norm, instance_norm, layer_norm, normalize
from serve.nn.functional.pooling import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
)
from serve.nn.functional.sparse import embedding, embedding_bag, one_hot
from serve.nn.functional.vision import interpolate, pad, upsample, upsample_bilinear, upsample_nearest
