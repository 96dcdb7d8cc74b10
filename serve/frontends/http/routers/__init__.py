"""One router per resource (FastAPI "bigger applications"); the app factories pick the ones each listener serves."""
