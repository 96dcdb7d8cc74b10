"""The layers, one file per family as in `torch.nn.modules` (containers, linear, conv, pooling, ...)."""

from serve.nn.modules.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
    Threshold,
)
from serve.nn.modules.attention import MultiheadAttention
from serve.nn.modules.container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from serve.nn.modules.conv import Conv1d, Conv2d, ConvTranspose1d, ConvTranspose2d
from serve.nn.modules.dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
from serve.nn.modules.flatten import Flatten, Identity, Unflatten
from serve.nn.modules.linear import Bilinear, Linear
from serve.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from serve.nn.modules.normalization import (
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
)
from serve.nn.modules.padding import (
    CircularPad1d,
    CircularPad2d,
    ConstantPad1d,
    ConstantPad2d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReplicationPad1d,
    ReplicationPad2d,
    ZeroPad1d,
    ZeroPad2d,
)
from serve.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AvgPool1d,
    AvgPool2d,
    MaxPool1d,
    MaxPool2d,
)
from serve.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from serve.nn.modules.sparse import Embedding, EmbeddingBag
from serve.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from serve.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
