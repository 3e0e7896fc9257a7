"""The HTTP side: the external-dns wire format, the ASGI apps and the uvicorn servers that host them."""
