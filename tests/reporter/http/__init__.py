"""Tests of ``reporter._http``: the lean HTTP/1.1 client transport and the bounded server, on
real sockets."""
