// A scripted ACP client on the TypeScript SDK's ClientSideConnection,
// driving `dsh acp`: one session whose first turn starts two children,
// each of which asks to run a shell command (the first is approved, the
// second rejected); a second turn that is cancelled while its permission
// request is pending; then a new `dsh acp` process that loads the session
// again. Every update and permission request received is printed, one
// JSON object per line, for the Rust test to normalise and snapshot.
//
// Usage: node session.mjs SDK_ACP_JS DSH_BINARY SESSIONS_DIR WORKSPACE
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const [sdkPath, dsh, sessions, workspace] = process.argv.slice(2);
const acp = await import(sdkPath);

const print = (record) => process.stdout.write(JSON.stringify(record) + "\n");

function start() {
  const agent = spawn(
    dsh,
    ["acp", "--dir", sessions, "--model", "openai:fake", "--sandbox", "read-only"],
    { stdio: ["pipe", "pipe", "inherit"], cwd: workspace },
  );
  const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));
  return { agent, stream };
}

// What the client answers, question by question.
const answers = ["allow", "reject", "cancel"];
let pendingCancel = null;

function client(connection, phase) {
  return {
    async sessionUpdate(params) {
      print({ phase, kind: "update", sessionId: params.sessionId, update: params.update });
    },
    async requestPermission(params) {
      const answer = answers.shift() ?? "reject";
      print({
        phase,
        kind: "permission",
        sessionId: params.sessionId,
        toolCall: params.toolCall,
        options: params.options.map((option) => [option.optionId, option.kind]),
        answer,
      });
      if (answer === "cancel") {
        // Cancel the turn while this question is up; answer it only
        // after the turn has ended, as `cancelled`.
        await connection().cancel({ sessionId: params.sessionId });
        await new Promise((resolve) => {
          pendingCancel = resolve;
        });
        return { outcome: { outcome: "cancelled" } };
      }
      return { outcome: { outcome: "selected", optionId: answer } };
    },
  };
}

async function connect(phase) {
  const { agent, stream } = start();
  let connection;
  connection = new acp.ClientSideConnection(() => client(() => connection, phase), stream);
  const init = await connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: {},
  });
  print({ phase, kind: "initialized", loadSession: init.agentCapabilities?.loadSession ?? false });
  return { agent, connection };
}

const exited = (agent) =>
  new Promise((resolve) => {
    if (agent.exitCode !== null) resolve(agent.exitCode);
    else agent.on("exit", (code) => resolve(code));
  });

// First process: two turns.
const first = await connect("live");
const { sessionId } = await first.connection.newSession({ cwd: workspace, mcpServers: [] });
print({ phase: "live", kind: "session", sessionId });
const done = await first.connection.prompt({
  sessionId,
  prompt: [{ type: "text", text: "Start two helpers." }],
});
print({ phase: "live", kind: "stop", stopReason: done.stopReason });
const cancelled = await first.connection.prompt({
  sessionId,
  prompt: [{ type: "text", text: "One more command." }],
});
print({ phase: "live", kind: "stop", stopReason: cancelled.stopReason });
pendingCancel?.();
first.agent.stdin.end();
print({ phase: "live", kind: "exit", code: await exited(first.agent) });

// Second process: the session loaded again.
const second = await connect("load");
await second.connection.loadSession({ sessionId, cwd: workspace, mcpServers: [] });
print({ phase: "load", kind: "loaded" });
second.agent.stdin.end();
print({ phase: "load", kind: "exit", code: await exited(second.agent) });
