"""The tests, in folders that mirror the code: ``tests/README.md`` says where a test goes."""
