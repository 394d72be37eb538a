"""The grader's own copy of a lab's protobuf contract, compiled from the course's release
(labs/<lab>/, identical to solutions/ by test) into a private descriptor pool: it never
shares classes with the modules a student generated in their own folder."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

from cluster.settings import ROOT

RELEASE = ROOT / "labs"


@cache
def messages(lab: str, proto: str) -> dict[str, type]:
    """Message name -> class, for labs/<lab>/<proto>."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    src = RELEASE / lab / proto
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "set.pb"
        rc = protoc.main(["protoc", f"-I{src.parent}", f"--descriptor_set_out={out}", src.name])
        if rc != 0:
            raise RuntimeError(f"protoc could not compile {src}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    classes = {}
    for f in fds.file:
        pool.Add(f)
        for m in f.message_type:
            full = f"{f.package}.{m.name}" if f.package else m.name
            classes[m.name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return classes
