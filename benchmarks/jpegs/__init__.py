"""The parts of ``bench_images.py``: the work (``work``), the data (``data``), each loader
(``loaders``) and the interpreter each loader runs in (``child``)."""
