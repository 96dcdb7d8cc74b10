"""TorchServe's `ts` package (its handler API) on serve: what a TorchServe handler imports, unchanged.

    ts.torch_handler.base_handler.BaseHandler        and the built-in handlers beside it (vision_handler,
    image_classifier, image_segmenter, object_detector, text_handler, text_classifier, request_envelope.*)
    ts.context.Context                               serve's worker Context (TorchServe's attributes and methods)
    ts.utils.util                                    map_class_to_label, load_label_mapping, PredictionException, ...
    ts.metrics.{metric_type_enum, dimension}         MetricTypes, Dimension; the cache API is `context.metrics`
    ts.handler_utils.{timer, micro_batching}         the `timed` decorator, MicroBatching (plain Python threads)
    ts.handler_utils.utils, ts.protocol.otf_message_handler   send_intermediate_predict_response (streaming)

Decision: these modules are thin, TorchServe-named adapters over serve's own classes (handlers.base_handler,
serve.worker.context, serve.worker.metrics_cache), not a second implementation, so a TorchServe handler and a
serve handler behave the same way (per-request errors, devices, dtypes). They are reached as `ts.X.Y` only
through the worker's import hook while torch compatibility is on (serve/worker/torch_compat.py), never
installed as a top-level `ts`, so a user's real TorchServe is never shadowed. What TorchServe does through torch
that serve cannot (TorchScript, torch.compile, IPEX, ONNX/TensorRT sessions, compiled extensions) raises at
initialize with the feature and the alternative named, never per request.
"""
