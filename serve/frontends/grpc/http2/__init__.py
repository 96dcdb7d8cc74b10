"""HTTP/2 for serve's gRPC server: connection.py (the frame state machine, RFC 9113) on lifecycle.py (a server
connection's life: admission, reading in turns, time bounds, ending), stream.py (a stream and its listener),
receive.py (receive windows and the memory budget), request_headers.py (section 8's checks), flood.py (frames that
do no work), frames.py (the wire vocabulary), hpack.py and huffman.py (header compression, RFC 7541), errors.py
(HTTP/2's error codes). Nothing here knows gRPC; ../call.py does."""
