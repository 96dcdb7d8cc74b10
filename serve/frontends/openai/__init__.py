"""serve.frontends.openai: the OpenAI-compatible routes (`/v1/models`, `/v1/completions`, `/v1/chat/completions`,
`/v1/embeddings`, also under `/predictions/{model}[/{version}]/v1/...`) and the Open Inference Protocol's generate
extension, over the one DataPlane.

Files: routes.py (paths, auth, error bodies), schemas.py (request bodies), wire.py (the generative wire to the
model: gen_contract.md), completions.py / chat.py / embeddings.py / models.py / generate.py (one answer each),
choices.py (usage, logprobs shapes), sse.py (Server-Sent Events), errors.py (OpenAI's error body).
The package is imported by the inference app (serve/frontends/http/app.py), not here, so importing it pulls in
nothing of http/.
"""
