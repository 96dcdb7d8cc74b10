"""serve.frontends.grpc: the gRPC listeners beside the REST ones (issue 7).

    servers = create_grpc_servers(dataplane, settings, auth)   # inference (7070) and management (7071)
    for s in servers: await s.start()
    ...
    await asyncio.gather(*(s.stop(grace) for s in servers))

Files: protos/ (our .proto files: TorchServe's inference/management, the KServe v2 `inference` package),
generated/ (grpc_tools.protoc output; regenerate.py is the one command that rewrites it), servicers/ (one file per
service, each calling the DataPlane), status.py (exception -> gRPC status, through serve.frontends.errors),
auth.py (the token interceptor), health.py (grpc.health.v1), server.py (create_grpc_servers), native.py (serve's
own gRPC server, the default), call.py (one gRPC call on it), http2/ (its HTTP/2 connection and HPACK).
Nothing is imported here, so a client can import one generated stub without loading the server.
"""
