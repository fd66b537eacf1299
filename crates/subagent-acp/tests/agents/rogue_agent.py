#!/usr/bin/env python3
"""A test-only ACP agent (standard library only) for the failure modes the
real SDK examples cannot produce: garbage on stdout, a non-zero exit mid
turn, ignoring cancel, EOF and SIGTERM, a silent start-up, a grandchild in
its process group, and every stop reason.

Start-up behaviour comes from the arguments:
  --silent        never answer anything (start-up timeout)
  --ignore-eof    keep running after stdin closes
  --ignore-term   ignore SIGTERM
  --images        advertise image prompts
  --exit-at-init N  exit with status N on initialize
  --complain      before that exit, write 8 numbered lines to stderr, the
                  last naming DSH_ACP_TEST_SECRET's value (to be masked)
  --models A,B    advertise a model selector (config option `model`,
                  category `model`) offering the value ids A and B, the
                  first current; `session/set_config_option` sets it
  --log-starts PATH  append one line to PATH when it starts
  --sessions DIR  advertise loadSession and keep each session in DIR (what
                  it said), so a later process can `session/load` it: the
                  history is replayed as message chunks; an unknown id is
                  answered -32002
  --auth-fails    answer session/new with -32000 "Authentication required"
                  and data naming an auth method, plus the value of
                  DSH_ACP_TEST_SECRET when set (which must never be shown)

The prompt's text is a script of `;`-separated commands, run in order:
  say TEXT | think TEXT | plan | tool | env | cwd | images | garbage |
  exit N | hang | wait_cancel | stop REASON | error | grandchild |
  close_stdout | sleep SECONDS | ask COMMAND | usage IN OUT [THOUGHT] | model |
  recall | message | tool_open TITLE
(`ask` requests permission to run COMMAND; refused, the turn stops
`cancelled`, granted it says `granted OPTION_ID`. `usage` reports a
context-window update of IN+OUT tokens used of 200000 and adds IN input and
OUT output tokens (and THOUGHT thought tokens) to the turn's usage in the
prompt response. `model` says
the current model; `recall` says what the session said in earlier turns; after `message`,
every `say` carries a new messageId, one per `message`; `tool_open` starts a
tool call titled TITLE and never finishes it.)
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

ARGS = sys.argv[1:]
OUT = sys.stdout
LOCK = threading.Lock()
CANCELLED = threading.Event()
STATE = {"session_cwd": None, "model": None, "said": [], "earlier": [], "message": None,
         "messages": 0}
PENDING = {}


def send(message):
    with LOCK:
        OUT.write(json.dumps(message) + "\n")
        OUT.flush()


def update(session_id, body):
    send({"jsonrpc": "2.0", "method": "session/update",
          "params": {"sessionId": session_id, "update": body}})


def say(session_id, text):
    STATE["said"].append(text)
    save(session_id)
    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
    if STATE["message"] is not None:
        chunk["messageId"] = STATE["message"]
    update(session_id, chunk)


def session_file(session_id):
    if "--sessions" not in ARGS:
        return None
    return os.path.join(ARGS[ARGS.index("--sessions") + 1], session_id + ".json")


def save(session_id):
    path = session_file(session_id)
    if path is not None:
        with open(path, "w") as f:
            json.dump({"cwd": STATE["session_cwd"], "said": STATE["said"]}, f)


def run_prompt(request_id, params):
    session_id = params["sessionId"]
    blocks = params.get("prompt", [])
    script = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
    stop = "end_turn"
    usage = None
    STATE["earlier"] = list(STATE["said"])
    for command in [c.strip() for c in script.split(";") if c.strip()]:
        verb, _, arg = command.partition(" ")
        if verb == "say":
            say(session_id, arg)
        elif verb == "think":
            update(session_id, {"sessionUpdate": "agent_thought_chunk",
                                "content": {"type": "text", "text": arg}})
        elif verb == "plan":
            update(session_id, {"sessionUpdate": "plan", "entries": [
                {"content": "look around", "priority": "high", "status": "completed"},
                {"content": "answer", "priority": "medium", "status": "in_progress"}]})
        elif verb == "tool":
            update(session_id, {"sessionUpdate": "tool_call", "toolCallId": "t1",
                                "title": "Listing files", "kind": "execute",
                                "status": "in_progress"})
            update(session_id, {"sessionUpdate": "tool_call_update", "toolCallId": "t1",
                                "status": "completed"})
        elif verb == "tool_open":
            update(session_id, {"sessionUpdate": "tool_call", "toolCallId": "t-open",
                                "title": arg, "kind": "read",
                                "status": "in_progress"})
        elif verb == "env":
            say(session_id, ",".join(sorted(os.environ)))
        elif verb == "cwd":
            say(session_id, os.getcwd() + "|" + str(STATE["session_cwd"]))
        elif verb == "images":
            say(session_id, str(sum(1 for b in blocks if b.get("type") == "image")))
        elif verb == "garbage":
            with LOCK:
                OUT.write("this is not json-rpc\n")
                OUT.flush()
        elif verb == "exit":
            OUT.flush()
            os._exit(int(arg))
        elif verb == "hang":
            while True:
                time.sleep(3600)
        elif verb == "wait_cancel":
            CANCELLED.wait()
            stop = "cancelled"
            break
        elif verb == "stop":
            stop = arg
        elif verb == "error":
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32603, "message": "internal detail\nsecond line",
                            "data": {"hint": "x" * 2000}}})
            return
        elif verb == "grandchild":
            child = subprocess.Popen(["sleep", "1000"])
            say(session_id, str(child.pid))
        elif verb == "close_stdout":
            OUT.flush()
            os.close(1)
            while True:
                time.sleep(3600)
        elif verb == "sleep":
            time.sleep(float(arg))
        elif verb == "usage":
            numbers = [int(n) for n in arg.split()]
            tokens_in, tokens_out = numbers[0], numbers[1]
            usage = usage or {"inputTokens": 0, "outputTokens": 0}
            usage["inputTokens"] += tokens_in
            usage["outputTokens"] += tokens_out
            if len(numbers) > 2:
                usage["thoughtTokens"] = usage.get("thoughtTokens", 0) + numbers[2]
            update(session_id, {"sessionUpdate": "usage_update",
                                "used": tokens_in + tokens_out, "size": 200000})
        elif verb == "recall":
            say(session_id, "recalled: " + "|".join(STATE["earlier"]))
        elif verb == "message":
            STATE["messages"] += 1
            STATE["message"] = "m%d" % STATE["messages"]
        elif verb == "model":
            say(session_id, str(STATE["model"]))
        elif verb == "ask":
            answered = threading.Event()
            PENDING["ask-1"] = {"event": answered}
            send({"jsonrpc": "2.0", "id": "ask-1", "method": "session/request_permission",
                  "params": {"sessionId": session_id,
                             "toolCall": {"toolCallId": "t2", "title": arg, "kind": "execute"},
                             "options": [
                                 {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                                 {"optionId": "always", "name": "Always", "kind": "allow_always"},
                                 {"optionId": "no", "name": "Reject", "kind": "reject_once"}]}})
            answered.wait()
            outcome = PENDING["ask-1"].get("result", {}).get("outcome", {})
            if outcome.get("outcome") == "selected" and outcome.get("optionId") in ("yes", "always"):
                say(session_id, "granted " + outcome["optionId"])
            else:
                stop = "cancelled"
                break
    result = {"stopReason": stop}
    if usage is not None:
        usage["totalTokens"] = usage["inputTokens"] + usage["outputTokens"]
        result["usage"] = usage
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def models():
    if "--models" not in ARGS:
        return []
    return ARGS[ARGS.index("--models") + 1].split(",")


def config_options():
    return [{"id": "model", "name": "Model", "category": "model", "type": "select",
             "currentValue": STATE["model"],
             "options": [{"value": m, "name": m.upper()} for m in models()]}]


def main():
    if "--log-starts" in ARGS:
        with open(ARGS[ARGS.index("--log-starts") + 1], "a") as log:
            log.write("started\n")
    if "--ignore-term" in ARGS:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_at_init = None
    if "--exit-at-init" in ARGS:
        exit_at_init = int(ARGS[ARGS.index("--exit-at-init") + 1])
    for line in sys.stdin:
        if "--silent" in ARGS:
            continue
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if method is None and request_id in PENDING:
            PENDING[request_id]["result"] = message.get("result") or {}
            PENDING[request_id]["event"].set()
            continue
        if method == "initialize":
            if exit_at_init is not None:
                if "--complain" in ARGS:
                    for n in range(1, 8):
                        sys.stderr.write("rogue: complaint %d\n" % n)
                    sys.stderr.write("rogue: bad key %s in config\n"
                                     % os.environ.get("DSH_ACP_TEST_SECRET", ""))
                    sys.stderr.flush()
                os._exit(exit_at_init)
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": 1,
                "agentCapabilities": {"promptCapabilities": {"image": "--images" in ARGS},
                                      "loadSession": "--sessions" in ARGS}}})
        elif method == "session/new" and "--auth-fails" in ARGS:
            secret = os.environ.get("DSH_ACP_TEST_SECRET", "")
            send({"jsonrpc": "2.0", "id": request_id, "error": {
                "code": -32000, "message": "Authentication required " + secret,
                "data": {"authMethods": ["chatgpt"], "token": secret}}})
        elif method == "session/new":
            STATE["session_cwd"] = params.get("cwd")
            session_id = "rogue-1"
            if "--sessions" in ARGS:
                session_id = "rogue-" + os.urandom(6).hex()
            result = {"sessionId": session_id}
            save(session_id)
            if models():
                STATE["model"] = models()[0]
                result["configOptions"] = config_options()
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "session/set_config_option" and params.get("configId") == "model" \
                and params.get("value") in models():
            STATE["model"] = params["value"]
            send({"jsonrpc": "2.0", "id": request_id,
                  "result": {"configOptions": config_options()}})
        elif method == "session/load":
            path = session_file(params.get("sessionId", ""))
            if path is None or not os.path.exists(path):
                send({"jsonrpc": "2.0", "id": request_id,
                      "error": {"code": -32002, "message": "Resource not found"}})
                continue
            with open(path) as f:
                stored = json.load(f)
            STATE["session_cwd"] = stored["cwd"]
            STATE["said"] = []
            for text in stored["said"]:
                say(params["sessionId"], text)
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "session/prompt":
            threading.Thread(target=run_prompt, args=(request_id, params), daemon=True).start()
        elif method == "session/cancel":
            CANCELLED.set()
        elif request_id is not None and method is not None:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": "method not found"}})
    if "--ignore-eof" in ARGS or "--silent" in ARGS:
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
