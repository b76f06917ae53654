"""What the tests share, in one place: the fixtures every test folder sees (``fixtures``, a
pytest plugin that ``tests/conftest.py`` loads) and the builders they use.  A fixture or a
helper that two test folders need lives here, once."""
