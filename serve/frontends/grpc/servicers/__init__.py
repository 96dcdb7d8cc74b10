"""One servicer per gRPC service, each a thin adapter onto the DataPlane.

torchserve_inference.py (org.pytorch.serve.grpc.inference.InferenceAPIsService),
torchserve_management.py (org.pytorch.serve.grpc.management.ManagementAPIsService),
kserve_v2.py (inference.GRPCInferenceService, through serve.frontends.oip).
"""
