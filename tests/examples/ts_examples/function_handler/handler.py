from ts.torch_handler.base_handler import BaseHandler

_service = BaseHandler()


def handle(data, context):
    """A module-level entry point, TorchServe's custom-service form: initialise once, then run the stages."""
    if not _service.initialized:
        _service.initialize(context)
    if data is None:
        return None
    data = _service.preprocess(data)
    data = _service.inference(data)
    return _service.postprocess(data)
