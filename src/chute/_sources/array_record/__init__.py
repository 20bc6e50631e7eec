"""ArrayRecord: ``ArrayRecordDataSource`` over local files, a ``.chute-index`` or a bucket.

``source`` reads local files through array_record's reader (``files`` and ``paths``
say which files, how many records, whether they changed); ``indexed`` reads the
shards of an index or a bucket through chute's own reader (``ranged``, with
``format``, ``footer``, ``chunk_cache`` and ``read_together``), with few of them open
at once (``open_shards``, ``kept_offsets``).  ``index`` writes and reads the index,
``writer`` writes the files, ``native`` loads array_record's C++ module.
"""
