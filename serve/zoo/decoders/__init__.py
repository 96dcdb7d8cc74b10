"""Decoder families of Hugging Face checkpoints, written for the generative engine (step.py: the contract)."""
