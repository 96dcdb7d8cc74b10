"""serve.batching: jobs, bounded per-model job queues and the dynamic batcher (no HTTP, no tensors).

    queue = JobQueue(capacity=100)
    job = Job.create(InferenceRequest("id-1", {"body": b"..."}))
    queue.put(job)                                   # QueueFull at once when full
    batch = await Batcher(queue, batch_size=8, max_batch_delay_ms=5).next_batch(workers=1)

Files: job.py (InferenceRequest, InferenceResponse, Job), queue.py (JobQueue), batcher.py (Batcher).
"""

from serve.batching.batcher import Batcher
from serve.batching.job import DESCRIBE, PREDICT, InferenceRequest, InferenceResponse, Job
from serve.batching.queue import JobQueue

__all__ = ["DESCRIBE", "PREDICT", "Batcher", "InferenceRequest", "InferenceResponse", "Job", "JobQueue"]
