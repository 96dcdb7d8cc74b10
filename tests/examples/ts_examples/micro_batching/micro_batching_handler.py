import logging

from ts.handler_utils import MicroBatching
from ts.torch_handler.image_classifier import ImageClassifier

logger = logging.getLogger(__name__)


class MicroBatchingHandler(ImageClassifier):
    """TorchServe's micro-batching contract: handle is a MicroBatching set up in __init__, sized at initialize."""

    def __init__(self):
        mb_handle = MicroBatching(self)
        self.handle = mb_handle

    def initialize(self, ctx):
        super().initialize(ctx)
        config = ctx.model_yaml_config.get("micro_batching", {})
        parallelism = config.get("parallelism", None)
        if parallelism:
            logger.info("micro-batching parallelism: %s", parallelism)
            self.handle.parallelism = parallelism
        self.handle.micro_batch_size = config.get("micro_batch_size", 1)
