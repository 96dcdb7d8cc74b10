"""LSTMClassifier: the text classifier of PyTorch's tutorials, Embedding -> LSTM -> Linear on the last state."""

from __future__ import annotations

import serve
from serve import nn


class LSTMClassifier(nn.Module):
    """Token ids (B, T) -> logits (B, num_classes) from the LSTM's final hidden state.

    Keys: `embedding.weight`, `lstm.weight_ih_l0`, `lstm.weight_hh_l0`, `lstm.bias_ih_l0`, `lstm.bias_hh_l0`
    (plus `_reverse` and `l1`, ... for bidirectional and stacked LSTMs), `fc.weight`, `fc.bias`, as in the
    PyTorch original built from `nn.Embedding`, `nn.LSTM(batch_first=True)` and `nn.Linear`. Sequences are
    read to the end, so pad on the left (or use equal lengths) when the last state should be the last token's.
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 64,
        hidden_size: int = 128,
        num_classes: int = 2,
        num_layers: int = 1,
        bidirectional: bool = False,
        dropout: float = 0.0,
        padding_idx: int | None = 0,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=padding_idx)
        self.lstm = nn.LSTM(
            embedding_dim, hidden_size, num_layers=num_layers, batch_first=True, dropout=dropout,
            bidirectional=bidirectional,
        )  # fmt: skip
        self.fc = nn.Linear(hidden_size * (2 if bidirectional else 1), num_classes)

    def forward(self, input_ids: serve.Tensor) -> serve.Tensor:
        _, (h_n, _) = self.lstm(self.embedding(input_ids))  # h_n: (num_layers * directions, B, hidden)
        if self.lstm.bidirectional:
            last = serve.cat([h_n[-2], h_n[-1]], dim=1)  # (B, 2 * hidden): last layer, forward then backward
        else:
            last = h_n[-1]  # (B, hidden)
        return self.fc(last)
