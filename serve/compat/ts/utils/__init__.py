"""`ts.utils`: TorchServe's handler utilities (`ts.utils.util`)."""
