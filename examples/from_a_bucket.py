"""A shuffled ArrayRecord data set read straight from S3 and from GCS, without FUSE.

Converts generated rows into shards in an S3 bucket and in a GCS bucket with
``chute convert``, then reads each with a global shuffle through
``ArrayRecordDataSource("s3://.../train.chute-index")``, and shows that a checkpoint
taken while reading S3 resumes on the GCS copy at exactly the next batch.

With no bucket of your own it starts both stores on localhost (moto's S3 server and
the GCS emulator: ``pip install 'moto[server]' gcp-storage-emulator gcsfs``, all in
``chute[test]``) and sets the variables you would set for real buckets:

    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION   # your S3 credentials
    AWS_ENDPOINT_URL            # only for an S3-compatible store other than AWS
    GOOGLE_APPLICATION_CREDENTIALS                         # your GCS service account
    STORAGE_EMULATOR_HOST       # only for the GCS emulator

To use your own buckets, set those and name two writable prefixes:

    CHUTE_EXAMPLE_S3=s3://my-bucket/chute-example CHUTE_EXAMPLE_GCS=gs://my-bucket/chute-example \\
        python examples/from_a_bucket.py

Run:  python examples/from_a_bucket.py   (needs chute[remote,array_record])
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import socket
import tempfile
import time
from collections.abc import Iterator

import numpy as np

import chute as grain  # the same pipeline code runs with `import grain`
from chute.cli import main as chute_cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_buckets() -> Iterator[tuple[str, str]]:
    """S3 and GCS on localhost, each with a bucket, and the environment that finds them."""
    import boto3
    from gcp_storage_emulator.server import create_server
    from gcsfs.core import GCSFileSystem
    from moto.server import ThreadedMotoServer

    for name in ("werkzeug", "gcp_storage_emulator"):  # the servers' request logs
        logging.getLogger(name).setLevel(logging.CRITICAL)
    s3 = ThreadedMotoServer("127.0.0.1", 0, verbose=False)
    s3.start()
    s3_url = f"http://127.0.0.1:{s3.get_host_and_port()[1]}"
    gcs_port = _free_port()
    gcs = create_server("127.0.0.1", gcs_port, in_memory=True)
    gcs.start()
    httpd = getattr(getattr(gcs, "_api", None), "_httpd", None)
    if httpd is not None:  # the emulator prints a traceback when a client drops a connection
        httpd.handle_error = lambda request, address: None
    os.environ.update(
        AWS_ACCESS_KEY_ID="example",
        AWS_SECRET_ACCESS_KEY="example",
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=s3_url,
        STORAGE_EMULATOR_HOST=f"http://127.0.0.1:{gcs_port}",
    )
    boto3.client("s3", endpoint_url=s3_url).create_bucket(Bucket="example")
    GCSFileSystem(token="anon", endpoint_url=os.environ["STORAGE_EMULATOR_HOST"]).mkdir("example")
    try:
        yield "s3://example/data/train", "gs://example/data/train"
    finally:
        gcs.stop()
        s3.stop()


def pipeline(index_url: str) -> grain.IterDataset:
    source = grain.sources.ArrayRecordDataSource(index_url)  # reads the index, no shard yet
    return (
        grain.MapDataset.source(source)
        .seed(0)
        .shuffle()  # a global shuffle over every record of every shard
        .map(pickle.loads)  # `chute convert` stores each row pickled
        .map(lambda row: {"x": np.asarray(row["x"], np.float32), "label": row["label"]})
        .batch(64, drop_remainder=True)
        .to_iter_dataset()
    )


def run(s3_prefix: str, gcs_prefix: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        rows = os.path.join(folder, "rows.jsonl")
        with open(rows, "w") as f:
            for i in range(2_000):
                f.write(json.dumps({"x": [i, i * 0.5], "label": i % 10}) + "\n")
        for prefix in (s3_prefix, gcs_prefix):  # shards, manifest and index, uploaded whole
            start = time.perf_counter()
            chute_cli(["convert", rows, prefix, "--num-shards", "4", "--no-progress"])
            print(f"converted into {prefix} in {time.perf_counter() - start:.1f} s")
    from_s3, from_gcs = (
        iter(pipeline(s3_prefix + ".chute-index")),
        iter(pipeline(gcs_prefix + ".chute-index")),
    )
    for _ in range(5):
        batch = next(from_s3)
    print("batch 5 from S3: labels", batch["label"][:8], "x", batch["x"].shape)
    state = from_s3.get_state()  # positions only: the same for any copy of the data
    from_gcs.set_state(state)
    a, b = next(from_s3), next(from_gcs)
    same = np.array_equal(a["x"], b["x"]) and np.array_equal(a["label"], b["label"])
    print("checkpoint from S3 resumed on GCS:", "identical batch" if same else "DIFFERENT batch")
    cached_epochs(s3_prefix + ".chute-index")


def cached_epochs(index_url: str) -> None:
    """Two epochs with a local cache: the first starts each shard's download while it
    reads from the bucket; the second reads the local copies."""
    with tempfile.TemporaryDirectory() as cache_dir:
        source = grain.sources.ArrayRecordDataSource(
            index_url, cache_dir=cache_dir, cache_limit="1GB"
        )
        for epoch in (1, 2):
            start = time.perf_counter()
            records = sum(1 for _ in grain.MapDataset.source(source).seed(epoch).shuffle())
            seconds = time.perf_counter() - start
            print(f"epoch {epoch} with a cache: {records} records in {seconds:.2f} s")
            for _ in range(100):  # the downloads land (at most a few seconds)
                copies = os.listdir(os.path.join(cache_dir, "objects"))
                if len(copies) == len(source.shards):
                    break
                time.sleep(0.05)
        print(f"shard copies in the cache: {len(copies)} of {len(source.shards)}")


if __name__ == "__main__":
    mine = os.environ.get("CHUTE_EXAMPLE_S3"), os.environ.get("CHUTE_EXAMPLE_GCS")
    if all(mine):
        run(*mine)  # type: ignore[arg-type]
    else:
        with local_buckets() as (s3_prefix, gcs_prefix):
            run(s3_prefix, gcs_prefix)
