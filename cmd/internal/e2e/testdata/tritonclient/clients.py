"""NVIDIA's tritonclient against `streamgate serve`: tritonclient.grpc on
the engine's gRPC port and tritonclient.http on the gateway, as a user
would run them. Environment: STREAMGATE_QA_GRPC, STREAMGATE_QA_HTTP."""
import os
import queue
import threading
import unittest
from functools import partial

import asyncio
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

GRPC = os.environ["STREAMGATE_QA_GRPC"]
HTTP = os.environ["STREAMGATE_QA_HTTP"]


def repeat_inputs(mod, values, delays, wait=0):
    ins = [mod.InferInput("IN", [len(values)], "INT32"), mod.InferInput("DELAY", [len(delays)], "UINT32"),
           mod.InferInput("WAIT", [1], "UINT32")]
    ins[0].set_data_from_numpy(np.array(values, dtype=np.int32))
    ins[1].set_data_from_numpy(np.array(delays, dtype=np.uint32))
    ins[2].set_data_from_numpy(np.array([wait], dtype=np.uint32))
    return ins


class GRPCTest(unittest.TestCase):
    def setUp(self):
        self.client = grpcclient.InferenceServerClient(GRPC)

    def tearDown(self):
        self.client.close()

    def test_health_and_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready("repeat_int32"))
        md = self.client.get_model_metadata("repeat_int32")
        self.assertEqual([i.name for i in md.inputs], ["IN", "DELAY", "WAIT"])
        cfg = self.client.get_model_config("repeat_int32").config
        self.assertTrue(cfg.model_transaction_policy.decoupled)

    def test_infer_and_async(self):
        x = np.arange(16, dtype=np.int32)
        inp = grpcclient.InferInput("INPUT0", [16], "INT32")
        inp.set_data_from_numpy(x)
        r = self.client.infer("identity_int32", [inp])
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)
        done = queue.Queue()
        self.client.async_infer("identity_int32", [inp], callback=lambda result, error: done.put((result, error)))
        result, error = done.get(timeout=30)
        self.assertIsNone(error)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)

    def test_streaming_decoupled(self):
        got = queue.Queue()
        self.client.start_stream(callback=lambda result, error: got.put((result, error)))
        self.client.async_stream_infer("repeat_int32", repeat_inputs(grpcclient, [4, 5, 6], [0, 10, 10]),
                                       request_id="r1", enable_empty_final_response=True)
        outs = []
        while True:
            result, error = got.get(timeout=30)
            self.assertIsNone(error)
            resp = result.get_response()
            if resp.parameters["triton_final_response"].bool_param:
                break
            outs.append(int(result.as_numpy("OUT")[0]))
        self.assertEqual(outs, [4, 5, 6])
        # An in-band error keeps the stream usable.
        self.client.async_stream_infer("repeat_int32", repeat_inputs(grpcclient, [1], [0, 0]), request_id="bad")
        result, error = got.get(timeout=30)
        self.assertIn("expected IN and DELAY shape to match", str(error))
        self.client.stop_stream()

    def test_stream_cancel(self):
        got = queue.Queue()
        self.client.start_stream(callback=lambda result, error: got.put((result, error)))
        self.client.async_stream_infer("repeat_int32", repeat_inputs(grpcclient, list(range(100)), [50] * 100),
                                       request_id="long")
        result, error = got.get(timeout=30)
        self.assertIsNone(error)
        self.client.stop_stream(cancel_requests=True)
        while not got.empty():
            result, error = got.get_nowait()
            if error is not None:
                self.assertIn("Locally cancelled by application!", str(error))

    def test_sequence(self):
        # simple_sequence: OUTPUT = (INPUT + START) * READY.
        got = []
        for i, v in enumerate([1, 2, 3]):
            inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
            r = self.client.infer("simple_sequence", [inp], sequence_id=4242, sequence_start=i == 0,
                                  sequence_end=i == 2)
            got.append(int(r.as_numpy("OUTPUT")[0][0]))
        self.assertEqual(got, [2, 2, 3])


class AioTest(unittest.IsolatedAsyncioTestCase):
    async def test_stream(self):
        async with aioclient.InferenceServerClient(GRPC) as c:
            async def requests():
                yield {"model_name": "repeat_int32", "inputs": repeat_inputs(aioclient, [7, 8], [0, 0]),
                       "request_id": "a1", "enable_empty_final_response": True}

            outs = []
            async for result, error in c.stream_infer(requests()):
                self.assertIsNone(error)
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
                outs.append(int(result.as_numpy("OUT")[0]))
            self.assertEqual(outs, [7, 8])


class HTTPTest(unittest.TestCase):
    def setUp(self):
        self.client = httpclient.InferenceServerClient(HTTP, concurrency=4)

    def tearDown(self):
        self.client.close()

    def test_health_and_metadata(self):
        self.assertTrue(self.client.is_server_live())
        self.assertTrue(self.client.is_server_ready())
        self.assertTrue(self.client.is_model_ready("identity_int32"))
        self.assertEqual(self.client.get_model_metadata("identity_int32")["name"], "identity_int32")

    def test_binary_and_json(self):
        x = np.arange(1000, dtype=np.int32)
        for binary in (True, False):
            inp = httpclient.InferInput("INPUT0", [1000], "INT32")
            inp.set_data_from_numpy(x, binary_data=binary)
            out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)
            r = self.client.infer("identity_int32", [inp], outputs=[out])
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), x)

    def test_async(self):
        x = np.arange(8, dtype=np.int32)
        inp = httpclient.InferInput("INPUT0", [8], "INT32")
        inp.set_data_from_numpy(x)
        reqs = [self.client.async_infer("identity_int32", [inp]) for _ in range(8)]
        for r in reqs:
            np.testing.assert_array_equal(r.get_result().as_numpy("OUTPUT0"), x)

    def test_errors(self):
        with self.assertRaises(InferenceServerException) as cm:
            self.client.get_model_metadata("nope")
        self.assertIn("Request for unknown model: 'nope' is not found", str(cm.exception))
        with self.assertRaises(InferenceServerException) as cm:
            self.client.infer("repeat_int32", repeat_inputs(httpclient, [1], [0]))
        self.assertIn("doesn't support models with decoupled transaction policy", str(cm.exception))

    def test_sequence(self):
        got = []
        for i, v in enumerate([4, 5]):
            inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[v]], dtype=np.int32))
            r = self.client.infer("simple_sequence", [inp], sequence_id=4343, sequence_start=i == 0,
                                  sequence_end=i == 1)
            got.append(int(r.as_numpy("OUTPUT")[0][0]))
        self.assertEqual(got, [5, 5])


if __name__ == "__main__":
    unittest.main()
