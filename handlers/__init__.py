"""Built-in handlers, referenced by short name (`model-archiver --handler text_embedding`), as TorchServe's.

    base_handler      the contract (BaseHandler): a model file + state_dict, JSON numbers in, `tolist()` out
    image_classifier  images (JPEG/PNG/WebP) -> softmax top-k `{label: prob}` with index_to_name.json
    image_segmenter   images -> per pixel [class, probability]
    object_detector   images -> boxes, labels and scores of a detection model
    text_classifier   text -> softmax `{label: prob}` over every class (tokenizer.json, index_to_name.json), batched
    text_embedding    text -> an L2-normalised sentence embedding (mean pooling), batched
    text_generation   a Hugging Face decoder folder -> streamed tokens (serve's engine, continuous batching)
    tensor            `.npy` bytes or a JSON nested list -> the model's output as JSON or `.npy` (Accept header)

Settings come from the model-config YAML's `handler:` section (`BaseHandler.handler_config`). Other modules
here (vision_handler, transforms, text_input, text_vocab, shape_groups, generation_metrics) are building blocks,
not handlers.
"""

from serve.archive import BUILTIN_HANDLERS  # the one list: model-archiver does not copy these

__all__ = ["BUILTIN_HANDLERS"]
