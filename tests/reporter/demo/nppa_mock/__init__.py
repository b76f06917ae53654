"""The anti-addiction interface mock answers as the protocol says, over real HTTP on 127.0.0.1."""
