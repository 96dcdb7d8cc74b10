import torch.nn as nn


class TextSentiment(nn.Module):
    """An EmbeddingBag over token and bigram ids, then a linear layer: TorchServe's text classification model."""

    def __init__(self, vocab_size=32, embed_dim=16, num_class=4):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=True)
        self.fc = nn.Linear(embed_dim, num_class)

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)
