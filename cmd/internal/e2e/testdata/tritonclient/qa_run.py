"""Runs one of Triton's QA test files with NVIDIA's tritonclient pointed
at the servers under test, which listen on free ports, not Triton's
fixed ones. Usage: qa_run.py FILE [TEST ...] (unittest names).

Environment: STREAMGATE_QA_GRPC, STREAMGATE_QA_HTTP (host:port);
STREAMGATE_QA_MODELS, if set, keeps only those models in
L0_decoupled's trials (the ensembles need backends the engine lacks);
STREAMGATE_QA_NON_DECOUPLED, if set, is the model L0_decoupled's
NonDecoupledTest asks for "repeat_int32" (Triton's test.sh serves
repeat_int32 with decoupled: False from a second repository; the engine
serves that model beside the decoupled one, under another name).
"""
import os
import runpy
import sys

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

GRPC = os.environ["STREAMGATE_QA_GRPC"]
HTTP = os.environ["STREAMGATE_QA_HTTP"]


def redirect(cls, fixed, real):
    init = cls.__init__

    def __init__(self, url, *args, **kwargs):
        init(self, real if url in fixed else url, *args, **kwargs)

    cls.__init__ = __init__


redirect(grpcclient.InferenceServerClient, ("localhost:8001", "127.0.0.1:8001"), GRPC)
redirect(httpclient.InferenceServerClient, ("localhost:8000", "127.0.0.1:8000"), HTTP)

path, tests = sys.argv[1], sys.argv[2:]
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(path)), "..", "common"))
sys.argv = [path] + tests
keep = os.environ.get("STREAMGATE_QA_MODELS")
non_decoupled = os.environ.get("STREAMGATE_QA_NON_DECOUPLED")
if keep or non_decoupled:
    import unittest

    main = unittest.main

    def patch(name, change):
        cls = getattr(sys.modules["__main__"], name, None)
        if cls is None:
            return
        setup = cls.setUp

        def setUp(self):
            setup(self)
            change(self)

        cls.setUp = setUp

    def limited_main(*args, **kwargs):
        if keep:
            def trials(self):
                self.trials_ = [t for t in self.trials_ if t[0] in keep.split(",")]

            patch("DecoupledTest", trials)
        if non_decoupled:
            def model(self):
                self.model_name_ = non_decoupled

            patch("NonDecoupledTest", model)
        return main(*args, **kwargs)

    unittest.main = limited_main
runpy.run_path(path, run_name="__main__")
