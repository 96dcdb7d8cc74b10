import json
import time

import torch
from ts.metrics.dimension import Dimension
from ts.metrics.metric_type_enum import MetricTypes
from ts.torch_handler.base_handler import BaseHandler


class CustomMetricsHandler(BaseHandler):
    """Records custom metrics each way TorchServe's metrics API offers, and answers the model's probabilities."""

    def initialize(self, context):
        super().initialize(context)
        self.model_name = context.model_name
        self.request_count = context.metrics.add_metric_to_cache(
            metric_name="ExampleRequestCount",
            unit="count",
            dimension_names=["ModelName"],
            metric_type=MetricTypes.COUNTER,
        )
        context.metrics.add_metric_to_cache("ExampleBatchSize", "count", ["ModelName"], MetricTypes.HISTOGRAM)

    def preprocess(self, data):
        rows = []
        for idx, row in enumerate(data):
            body = row.get("data") or row.get("body")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            rows.append(body)
            self.context.metrics.add_size("ExampleRequestSize", len(json.dumps(body)) / 1024, idx, "kB")
        return torch.tensor(rows, dtype=torch.float32)

    def inference(self, data, *args, **kwargs):
        start = time.time()
        with torch.no_grad():
            out = self.model(data)
        metrics = self.context.metrics
        elapsed_ms = (time.time() - start) * 1000
        metrics.add_time("ExampleInferenceTime", elapsed_ms, None, "ms", [Dimension("Stage", "inference")])
        metrics.add_counter("ExampleBatchCount", 1, None, [Dimension("Stage", "inference")])
        self.request_count.add_or_update(len(data), [self.model_name])
        batch_size = metrics.get_metric("ExampleBatchSize", MetricTypes.HISTOGRAM)
        batch_size.update(len(data), dimensions=[Dimension("ModelName", self.model_name)])
        return out

    def postprocess(self, data):
        return data.tolist()
