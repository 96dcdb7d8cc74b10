"""What PyTorch and TorchServe users import, on serve's runtime: `torch` names beyond the runtime's own
namespace, `torchvision` (models, transforms, ops, io) and `ts` (TorchServe's handler API).

These modules are never installed as top-level `torch`, `torchvision` or `ts` packages, so a user's real ones
are never shadowed: the worker's import hook (`serve.worker.torch_compat`) maps those names to the modules here,
by name, only while an archive's torch compatibility is on. The layer sits above `worker` because the `ts`
handler API is built on the worker's Context and the built-in handlers; the hook refers to it by module name,
never by import, so the worker does not depend on it.
"""
