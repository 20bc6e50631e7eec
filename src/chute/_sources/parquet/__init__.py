"""Parquet: ``ParquetDataSource`` by row (``source``), ``ParquetIterDataset`` streamed (``iter``).

Both open files and read row groups through ``io`` (local paths, URLs, a filesystem)
and have pyarrow verify the pages' checksums where the files hold them (``checks``).
"""
