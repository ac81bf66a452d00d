"""A Triton stand-in on grpc core (python3-grpcio), for streamgate's tests.

It serves inference.GRPCInferenceService from stubs generated out of
streamgate's proto/ (wire-compatible with Triton's) with the channel
arguments it is given, so the transport the gateway meets is grpc core's,
as in Triton's server. Models:

  repeat_int32  decoupled: IN INT32 [n], DELAY UINT32 [n], WAIT UINT32 [1]
                -> n responses OUT=IN[i], IDX=i, the i-th after DELAY[i] ms
  square_int32  decoupled: IN INT32 [1] -> IN responses of OUT=IN,
                stops early once cancelled
  blob_uint8    IN UINT8 [-1], N INT64 [1] -> OUT UINT8 [N] (byte i is
                i*7 % 251), CRC UINT32 [1] (zlib.crc32 of IN)

Configured by one JSON argument: {"port": 0, "options": [[k, v], ...],
"tls": {"cert", "key", "ca"}, "inband_cancel": bool}. It prints "PORT n"
once serving, then one line per event the tests wait for:
  START <id> <peer> a stream request began, on the connection from peer
  CANCEL <id>       a request was cancelled in band (streamgate_cancel)
  RPCCANCEL <ids>   a stream RPC ended before its requests were done
On SIGTERM it stops with a 5 s grace and exits.
"""

import json
import os
import queue
import signal
import sys
import threading
import time
import zlib
from concurrent import futures

import grpc

import grpc_service_pb2 as pb
import grpc_service_pb2_grpc as pbg
import model_config_pb2 as mc

OUT_LOCK = threading.Lock()


def emit(*words):
    with OUT_LOCK:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()


def tensor_cfg(name, dtype, dims):
    return mc.ModelInput(name=name, data_type=dtype, dims=dims)


def out_cfg(name, dtype, dims):
    return mc.ModelOutput(name=name, data_type=dtype, dims=dims)


MODELS = {
    "repeat_int32": mc.ModelConfig(
        name="repeat_int32", backend="repeat", max_batch_size=0,
        model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
        input=[tensor_cfg("IN", mc.TYPE_INT32, [-1]), tensor_cfg("DELAY", mc.TYPE_UINT32, [-1]),
               tensor_cfg("WAIT", mc.TYPE_UINT32, [1])],
        output=[out_cfg("OUT", mc.TYPE_INT32, [1]), out_cfg("IDX", mc.TYPE_UINT32, [1])]),
    "square_int32": mc.ModelConfig(
        name="square_int32", backend="square", max_batch_size=0,
        model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
        input=[tensor_cfg("IN", mc.TYPE_INT32, [1])],
        output=[out_cfg("OUT", mc.TYPE_INT32, [1])]),
    "blob_uint8": mc.ModelConfig(
        name="blob_uint8", backend="blob", max_batch_size=0,
        input=[tensor_cfg("IN", mc.TYPE_UINT8, [-1]), tensor_cfg("N", mc.TYPE_INT64, [1])],
        output=[out_cfg("OUT", mc.TYPE_UINT8, [-1]), out_cfg("CRC", mc.TYPE_UINT32, [1])]),
}

DTYPES = {mc.TYPE_INT32: ("INT32", 4), mc.TYPE_UINT32: ("UINT32", 4), mc.TYPE_UINT8: ("UINT8", 1),
          mc.TYPE_INT64: ("INT64", 8)}
PATTERN = bytes(i * 7 % 251 for i in range(251 * 64))


class RequestError(Exception):
    """An error of one request, sent in band with its final flag."""


def unknown(name):
    return "Request for unknown model: '%s' is not found" % name


def inputs_of(req):
    """Returns {name: (shape, bytes)} of the request's inputs."""
    out = {}
    for i, t in enumerate(req.inputs):
        if i < len(req.raw_input_contents):
            data = req.raw_input_contents[i]
        elif t.datatype == "INT32":
            data = b"".join(int(v).to_bytes(4, "little", signed=True) for v in t.contents.int_contents)
        elif t.datatype == "UINT32":
            data = b"".join(int(v).to_bytes(4, "little") for v in t.contents.uint_contents)
        elif t.datatype == "INT64":
            data = b"".join(int(v).to_bytes(8, "little", signed=True) for v in t.contents.int64_contents)
        else:
            data = b"".join(t.contents.bytes_contents)
        out[t.name] = (list(t.shape), data)
    return out


def ints(data, size, signed):
    return [int.from_bytes(data[i:i + size], "little", signed=signed) for i in range(0, len(data), size)]


def response(req, outputs, final=None):
    """A ModelInferResponse with outputs [(name, datatype, shape, raw)]."""
    r = pb.ModelInferResponse(model_name=req.model_name, model_version="1", id=req.id)
    for name, dtype, shape, raw in outputs:
        r.outputs.add(name=name, datatype=dtype, shape=shape)
        r.raw_output_contents.append(raw)
    if final is not None:
        r.parameters["triton_final_response"].bool_param = final
    return r


def i32(v):
    return int(v).to_bytes(4, "little", signed=True)


def u32(v):
    return int(v).to_bytes(4, "little")


class Request:
    """One stream request: its model's responses, produced by run()."""

    def __init__(self, req):
        self.req = req
        self.cancelled = threading.Event()

    def run(self, send):
        """Calls send(ModelInferResponse) for each response; raises
        RequestError for the model's error."""
        req = self.req
        ins = inputs_of(req)
        if req.model_name == "repeat_int32":
            if "IN" not in ins or "DELAY" not in ins or "WAIT" not in ins:
                raise RequestError("expected 3 inputs but got %d inputs for model 'repeat_int32'" % len(ins))
            if ins["IN"][0] != ins["DELAY"][0]:
                raise RequestError("expected IN and DELAY shape to match, got %s and %s" % (
                    json.dumps(ins["IN"][0]).replace(" ", ""), json.dumps(ins["DELAY"][0]).replace(" ", "")))
            if len(ins["WAIT"][1]) != 4:
                raise RequestError("unexpected size for WAIT input")
            values = ints(ins["IN"][1], 4, True)
            delays = ints(ins["DELAY"][1], 4, False)
            for i, (v, d) in enumerate(zip(values, delays)):
                if d:
                    time.sleep(d / 1000)
                send(response(req, [("OUT", "INT32", [1], i32(v)), ("IDX", "UINT32", [1], u32(i))], False))
        elif req.model_name == "square_int32":
            if "IN" not in ins or ins["IN"][0] not in ([1], [1, 1]):
                raise RequestError("unexpected shape for IN input")
            n = ints(ins["IN"][1], 4, True)[0]
            for _ in range(max(n, 0)):
                if self.cancelled.is_set():
                    break
                send(response(req, [("OUT", "INT32", [1], i32(n))], False))
        elif req.model_name == "blob_uint8":
            send(blob(req, ins))
        else:
            raise RequestError(unknown(req.model_name))


def blob(req, ins):
    if "IN" not in ins or "N" not in ins:
        raise RequestError("expected 2 inputs but got %d inputs for model 'blob_uint8'" % len(ins))
    n = ints(ins["N"][1], 8, True)[0]
    out = (PATTERN * (n // len(PATTERN) + 1))[:n]
    crc = zlib.crc32(ins["IN"][1])
    return response(req, [("OUT", "UINT8", [n], out), ("CRC", "UINT32", [1], u32(crc))])


class Service(pbg.GRPCInferenceServiceServicer):
    def __init__(self, inband_cancel):
        self.inband_cancel = inband_cancel

    def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=request.name in MODELS)

    def ServerMetadata(self, request, context):
        ext = ["classification", "sequence", "model_repository", "schedule_policy", "model_configuration",
               "system_shared_memory", "statistics", "binary_tensor_data", "parameters"]
        if self.inband_cancel:
            ext.append("streamgate_cancel")
        return pb.ServerMetadataResponse(name="triton", version="2.40.0", extensions=ext)

    def config(self, name, context):
        cfg = MODELS.get(name)
        if cfg is None:
            context.abort(grpc.StatusCode.NOT_FOUND, unknown(name))
        return cfg

    def ModelMetadata(self, request, context):
        cfg = self.config(request.name, context)
        r = pb.ModelMetadataResponse(name=cfg.name, versions=["1"], platform=cfg.backend)
        for i in cfg.input:
            r.inputs.add(name=i.name, datatype=DTYPES[i.data_type][0], shape=i.dims)
        for o in cfg.output:
            r.outputs.add(name=o.name, datatype=DTYPES[o.data_type][0], shape=o.dims)
        return r

    def ModelConfig(self, request, context):
        return pb.ModelConfigResponse(config=self.config(request.name, context))

    def ModelInfer(self, request, context):
        cfg = self.config(request.model_name, context)
        if cfg.model_transaction_policy.decoupled:
            context.abort(grpc.StatusCode.UNIMPLEMENTED,
                          "ModelInfer RPC doesn't support models with decoupled transaction policy")
        try:
            return blob(request, inputs_of(request))
        except RequestError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    def ModelStreamInfer(self, request_iterator, context):
        out = queue.Queue()
        live = {}  # id -> Request, while running
        lock = threading.Lock()
        done = threading.Event()  # the generator returned normally

        def ended():
            if not done.is_set():
                with lock:
                    ids = sorted(live)
                for r in list(live.values()):
                    r.cancelled.set()
                emit("RPCCANCEL", ",".join(ids) or "-")

        context.add_callback(ended)

        def work(r):
            req = r.req
            final_empty = req.parameters["triton_enable_empty_final_response"].bool_param \
                if "triton_enable_empty_final_response" in req.parameters else False
            decoupled = MODELS[req.model_name].model_transaction_policy.decoupled \
                if req.model_name in MODELS else True
            try:
                if decoupled:
                    r.run(lambda resp: out.put(pb.ModelStreamInferResponse(infer_response=resp)))
                    if final_empty:
                        fin = pb.ModelInferResponse(model_name=req.model_name, model_version=req.model_version,
                                                    id=req.id)
                        fin.parameters["triton_final_response"].bool_param = True
                        out.put(pb.ModelStreamInferResponse(infer_response=fin))
                else:
                    def send(resp):
                        resp.parameters["triton_final_response"].bool_param = True
                        out.put(pb.ModelStreamInferResponse(infer_response=resp))
                    r.run(send)
            except RequestError as e:
                resp = pb.ModelInferResponse(id=req.id)
                if req.model_name in MODELS:
                    resp.model_name = req.model_name
                    resp.model_version = req.model_version
                    resp.parameters["triton_final_response"].bool_param = True
                out.put(pb.ModelStreamInferResponse(error_message=str(e), infer_response=resp))
            finally:
                with lock:
                    live.pop(req.id, None)
                out.put(None)

        def read():
            n = 0
            try:
                for req in request_iterator:
                    if req.parameters["streamgate_cancel"].bool_param if "streamgate_cancel" in req.parameters \
                            else False:
                        with lock:
                            r = live.get(req.id)
                        if r is not None:
                            r.cancelled.set()
                        emit("CANCEL", req.id or "-")
                        continue
                    emit("START", req.id or "-", context.peer())
                    if req.model_name not in MODELS:
                        resp = pb.ModelInferResponse(id=req.id)
                        out.put(pb.ModelStreamInferResponse(error_message=unknown(req.model_name),
                                                            infer_response=resp))
                        continue
                    r = Request(req)
                    with lock:
                        live[req.id] = r
                    n += 1
                    threading.Thread(target=work, args=(r,), daemon=True).start()
            except Exception:  # the RPC ended under the reader
                pass
            out.put(("EOF", n))

        threading.Thread(target=read, daemon=True).start()
        running, reading = 0, True
        while reading or running:
            item = out.get()
            if item is None:
                running -= 1
            elif isinstance(item, tuple):
                reading = False
                running += item[1]
            else:
                yield item
        done.set()


def credentials(tls):
    """Server credentials that reread the key pair when its files change."""
    ca = None
    if tls.get("ca"):
        with open(tls["ca"], "rb") as f:
            ca = f.read()
    state = {"stamp": None}

    def load():
        with open(tls["key"], "rb") as f:
            key = f.read()
        with open(tls["cert"], "rb") as f:
            cert = f.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def stamp():
        return (os.stat(tls["cert"]).st_mtime_ns, os.stat(tls["key"]).st_mtime_ns)

    state["stamp"] = stamp()

    def fetch():
        s = stamp()
        if s == state["stamp"]:
            return None
        state["stamp"] = s
        emit("RELOAD")
        return load()

    return grpc.dynamic_ssl_server_credentials(load(), fetch, require_client_authentication=ca is not None)


def main():
    cfg = json.loads(sys.argv[1])
    options = [tuple(o) for o in cfg.get("options", [])]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=256), options=options)
    pbg.add_GRPCInferenceServiceServicer_to_server(Service(cfg.get("inband_cancel", False)), server)
    addr = "127.0.0.1:%d" % cfg.get("port", 0)
    if cfg.get("tls"):
        port = server.add_secure_port(addr, credentials(cfg["tls"]))
    else:
        port = server.add_insecure_port(addr)
    if port == 0:
        sys.exit("cannot listen on " + addr)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit("PORT", port)
    stop.wait()
    server.stop(5).wait()


if __name__ == "__main__":
    main()
