//! Asking the person at the terminal (`--ask`, the default when stdin is a
//! terminal): a workspace tool's action above the `--sandbox` level, or an
//! ACP agent's permission request under `acp.permission = "ask"`, becomes
//! one question on stderr naming the agent, the tool and the exact command
//! or path, answered by one line on stdin. One question is up at a time:
//! concurrent requests (a lead's children) queue in arrival order, the
//! workspace ones through the tool crate's [`SerialAsker`] and every kind
//! behind one terminal lock. The live view is paused while a question is
//! up, so the tree never draws over it; lines that arrive meanwhile are
//! printed when it resumes. An answer is only ever taken for the question
//! on screen: a question withdrawn (its call cancelled) says so, and a line
//! typed after it and before the next question appears is discarded.
//! Otherwise lines answer questions in order, so answers can be piped in
//! (`--ask` with stdin a pipe). End of input answers no. Without `--ask` and without a terminal nothing asks, and the
//! tools refuse with a sentence the model can act on.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use dsh_core::SessionId;
use dsh_subagent::SubagentRuntime;
#[cfg(feature = "acp")]
use dsh_subagent_acp::{PermissionAnswer, PermissionAsker, PermissionQuestion};
use dsh_tool_workspace::{Answer, Asker, Request, SerialAsker};
use tokio::sync::mpsc;

use crate::observe::Reporter;

/// Whether actions above the level are put to the person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AskMode {
    /// Ask when stdin is a terminal (no flag).
    #[default]
    Auto,
    /// Ask on stdin/stderr whatever they are (`--ask`).
    Always,
    /// Never ask: refuse (`--no-ask`).
    Never,
}

impl AskMode {
    /// Whether to ask, given whether stdin is a terminal.
    pub fn asks(self, terminal: bool) -> bool {
        match self {
            Self::Auto => terminal,
            Self::Always => true,
            Self::Never => false,
        }
    }
}

/// Where answers come from and questions go.
type Input = Box<dyn BufRead + Send>;
type Output = Box<dyn Write + Send>;

/// The terminal: questions out, one answer line in, one question at a time.
pub struct Prompter {
    /// The reader, until the first question starts the thread that reads it.
    input: Mutex<Option<Input>>,
    /// Lines read, in order; `None` when input ended.
    lines: tokio::sync::Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    output: Mutex<Output>,
    /// For the agents' names.
    runtime: OnceLock<SubagentRuntime>,
    /// The live view to pause while a question is up.
    reporter: Option<Arc<Reporter>>,
    /// A question was withdrawn: lines read before the next one is on
    /// screen were meant for it.
    stale: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Prompter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prompter").finish_non_exhaustive()
    }
}

/// What a question offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offer {
    /// Yes or no.
    Once,
    /// Yes, always, or no (an ACP agent can remember an approval).
    #[cfg_attr(not(feature = "acp"), allow(dead_code))]
    Always,
}

/// The person's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Yes,
    Always,
    No,
}

impl Prompter {
    /// A prompter reading answers from `input` and writing questions to
    /// `output`, pausing `reporter`'s live view while asking.
    pub fn new(input: Input, output: Output, reporter: Option<Arc<Reporter>>) -> Arc<Self> {
        Arc::new(Self {
            input: Mutex::new(Some(input)),
            lines: tokio::sync::Mutex::new(None),
            output: Mutex::new(output),
            runtime: OnceLock::new(),
            reporter,
            stale: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The terminal: stdin and stderr.
    pub fn terminal(reporter: Option<Arc<Reporter>>) -> Arc<Self> {
        Self::new(
            Box::new(std::io::BufReader::new(std::io::stdin())),
            Box::new(std::io::stderr()),
            reporter,
        )
    }

    /// Name agents through `runtime` from now on.
    pub fn attach(&self, runtime: &SubagentRuntime) {
        let _ = self.runtime.set(runtime.clone());
    }

    /// The workspace tools' asker: requests queue one at a time.
    pub fn workspace(self: &Arc<Self>) -> Arc<dyn Asker> {
        Arc::new(SerialAsker::new(WorkspaceAsk(Arc::clone(self))))
    }

    /// The ACP provider's asker.
    #[cfg(feature = "acp")]
    pub fn acp(self: &Arc<Self>) -> Arc<dyn PermissionAsker> {
        Arc::new(AcpAsk(Arc::clone(self)))
    }

    fn name_of(&self, id: &SessionId) -> String {
        self.runtime
            .get()
            .and_then(|runtime| {
                let agent = runtime.registry().get(id)?;
                runtime.names_of(&agent).ok()
            })
            .map_or_else(|| id.to_string(), |names| names.self_name)
    }

    fn say(&self, text: &str) {
        let mut out = self.output.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// Put `question` and wait for the reply.
    ///
    /// # Cancel safety
    /// Dropped while waiting, the question is withdrawn on screen, the
    /// live view resumes, and the next question discards any line read
    /// before it appears: an answer is never taken for another question.
    async fn ask(&self, question: &str, offer: Offer) -> Reply {
        // One question at a time, in arrival order (a fair lock).
        let mut lines = self.lines.lock().await;
        if lines.is_none() {
            *lines = Some(self.start_reading());
        }
        let Some(receiver) = lines.as_mut() else {
            return Reply::No;
        };
        // Typed for a withdrawn question: not this one's answer.
        if self.stale.swap(false, std::sync::atomic::Ordering::SeqCst) {
            while receiver.try_recv().is_ok() {}
        }
        let mut shown = Shown {
            prompter: self,
            question,
            answered: false,
        };
        if let Some(reporter) = &self.reporter {
            reporter.pause().await;
        }
        let choices = match offer {
            Offer::Once => "[y/N]",
            Offer::Always => "[y/a(lways)/N]",
        };
        self.say(&format!("dsh: {question} Allow? {choices} "));
        let reply = match receiver.recv().await {
            None => {
                self.say("\ndsh: no answer (end of input): no\n");
                Reply::No
            }
            Some(line) => match (line.trim().to_ascii_lowercase().as_str(), offer) {
                ("y" | "yes", _) => Reply::Yes,
                ("a" | "always", Offer::Always) => Reply::Always,
                _ => Reply::No,
            },
        };
        shown.answered = true;
        reply
    }

    /// Start the thread that reads answer lines.
    fn start_reading(&self) -> mpsc::UnboundedReceiver<String> {
        let (sender, receiver) = mpsc::unbounded_channel();
        let input = self
            .input
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut input) = input {
            // A plain thread: a blocking read of stdin cannot be cancelled,
            // and it ends with the process (or at end of input).
            std::thread::spawn(move || {
                loop {
                    let mut line = String::new();
                    match input.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if sender.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
        receiver
    }
}

/// A question on screen; withdrawn if dropped unanswered, and the live view
/// resumed either way.
struct Shown<'a> {
    prompter: &'a Prompter,
    question: &'a str,
    answered: bool,
}

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.prompter
                .stale
                .store(true, std::sync::atomic::Ordering::SeqCst);
            self.prompter.say(&format!(
                "\ndsh: withdrawn (the call was cancelled): {}\n",
                self.question
            ));
        }
        if let Some(reporter) = &self.prompter.reporter {
            reporter.resume();
        }
    }
}

/// The workspace tools' side.
struct WorkspaceAsk(Arc<Prompter>);

#[async_trait]
impl Asker for WorkspaceAsk {
    /// # Cancel safety
    /// As [`Prompter::ask`]: a drop withdraws the question.
    async fn ask(&self, request: &Request) -> Answer {
        let question = format!(
            "{} wants to {} `{}` (needs {}; the level is {}).",
            self.0.name_of(&request.agent),
            match request.tool.as_str() {
                "shell" => "run with shell:".to_owned(),
                tool => format!("use {tool} on"),
            },
            request.subject,
            request.needed,
            request.level,
        );
        match self.0.ask(&question, Offer::Once).await {
            Reply::Yes | Reply::Always => Answer::Allow,
            Reply::No => Answer::Deny,
        }
    }
}

/// The ACP provider's side.
#[cfg(feature = "acp")]
#[derive(Debug)]
struct AcpAsk(Arc<Prompter>);

#[cfg(feature = "acp")]
#[async_trait]
impl PermissionAsker for AcpAsk {
    /// # Cancel safety
    /// As [`Prompter::ask`]: a drop withdraws the question.
    async fn ask(&self, question: PermissionQuestion) -> PermissionAnswer {
        let kind = question
            .kind
            .as_deref()
            .map(|kind| format!(" ({kind})"))
            .unwrap_or_default();
        let text = format!(
            "the ACP agent `{}` asks permission for: {}{kind}.",
            question.agent, question.action
        );
        match self.0.ask(&text, Offer::Always).await {
            Reply::Yes => PermissionAnswer::AllowOnce,
            Reply::Always => PermissionAnswer::AllowAlways,
            Reply::No => PermissionAnswer::Reject,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use dsh_tool_workspace::Level;

    use super::*;

    /// Everything written, shared with the test.
    #[derive(Clone, Default)]
    struct Screen(Arc<Mutex<Vec<u8>>>);

    impl Write for Screen {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Screen {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// A reader fed line by line by the test (a pipe).
    fn pipe() -> (std::io::PipeWriter, Input) {
        let (reader, writer) = std::io::pipe().unwrap();
        (writer, Box::new(std::io::BufReader::new(reader)))
    }

    fn request(tool: &str, subject: &str) -> Request {
        Request {
            agent: SessionId::generate(),
            tool: tool.to_owned(),
            subject: subject.to_owned(),
            level: Level::ReadOnly,
            needed: Level::WorkspaceWrite,
        }
    }

    const BOUND: Duration = Duration::from_secs(30);

    async fn until(screen: &Screen, needle: &str, count: usize) {
        tokio::time::timeout(BOUND, async {
            while screen.text().matches(needle).count() < count {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("never shown {count}× {needle:?}: {:?}", screen.text()));
    }

    #[tokio::test]
    async fn a_question_names_the_tool_and_the_exact_command_and_takes_one_line() {
        let screen = Screen::default();
        let (mut keys, input) = pipe();
        let prompter = Prompter::new(input, Box::new(screen.clone()), None);
        let asker = prompter.workspace();
        let ask = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("shell", "cargo test -p x")).await }
        });
        until(&screen, "Allow?", 1).await;
        assert!(
            screen
                .text()
                .contains("wants to run with shell: `cargo test -p x` (needs workspace-write; the level is read-only). Allow? [y/N] "),
            "{}",
            screen.text()
        );
        keys.write_all(b"y\n").unwrap();
        assert_eq!(ask.await.unwrap(), Answer::Allow);
        // Anything else is no; so is the end of input.
        let ask = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("edit_file", "src/lib.rs")).await }
        });
        until(&screen, "Allow?", 2).await;
        assert!(
            screen
                .text()
                .contains("wants to use edit_file on `src/lib.rs`")
        );
        keys.write_all(b"sure\n").unwrap();
        assert_eq!(ask.await.unwrap(), Answer::Deny);
        drop(keys);
        assert_eq!(asker.ask(&request("write_file", "a")).await, Answer::Deny);
        assert!(screen.text().ends_with("no answer (end of input): no\n"));
    }

    #[tokio::test]
    async fn answers_piped_in_ahead_answer_the_questions_in_order() {
        let screen = Screen::default();
        let (mut keys, input) = pipe();
        keys.write_all(b"y\nn\ny\n").unwrap();
        let prompter = Prompter::new(input, Box::new(screen.clone()), None);
        let asker = prompter.workspace();
        let mut answers = Vec::new();
        for subject in ["a", "b", "c"] {
            answers.push(asker.ask(&request("write_file", subject)).await);
        }
        assert_eq!(answers, [Answer::Allow, Answer::Deny, Answer::Allow]);
        assert_eq!(screen.text().matches("Allow? [y/N] ").count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_requests_are_asked_one_at_a_time_in_arrival_order() {
        let screen = Screen::default();
        let (mut keys, input) = pipe();
        let prompter = Prompter::new(input, Box::new(screen.clone()), None);
        let asker = prompter.workspace();
        let first = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("shell", "first")).await }
        });
        until(&screen, "Allow?", 1).await;
        let second = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("shell", "second")).await }
        });
        // The second waits its turn: every other task blocked, it is not shown.
        dsh_test_support::wait::settle().await;
        assert_eq!(screen.text().matches("Allow?").count(), 1);
        assert!(!screen.text().contains("second"));
        keys.write_all(b"n\n").unwrap();
        assert_eq!(first.await.unwrap(), Answer::Deny);
        until(&screen, "Allow?", 2).await;
        assert!(screen.text().contains("`second`"));
        keys.write_all(b"yes\n").unwrap();
        assert_eq!(second.await.unwrap(), Answer::Allow);
    }

    #[tokio::test]
    async fn a_withdrawn_question_says_so_and_its_late_answer_is_not_taken_for_the_next() {
        let screen = Screen::default();
        let (mut keys, input) = pipe();
        let prompter = Prompter::new(input, Box::new(screen.clone()), None);
        let asker = prompter.workspace();
        let cancelled = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("shell", "rm -rf build")).await }
        });
        until(&screen, "Allow?", 1).await;
        cancelled.abort();
        let _ = cancelled.await;
        assert!(screen.text().contains("withdrawn (the call was cancelled)"));
        // The answer meant for the withdrawn question arrives late: read,
        // before the next question is on screen.
        keys.write_all(b"y\n").unwrap();
        tokio::time::timeout(BOUND, async {
            while prompter
                .lines
                .lock()
                .await
                .as_ref()
                .map_or(0, |lines| lines.len())
                == 0
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the late line was never read");
        let next = tokio::spawn({
            let asker = Arc::clone(&asker);
            async move { asker.ask(&request("shell", "make")).await }
        });
        until(&screen, "Allow?", 2).await;
        keys.write_all(b"n\n").unwrap();
        assert_eq!(next.await.unwrap(), Answer::Deny);
    }

    #[cfg(feature = "acp")]
    #[tokio::test]
    async fn an_acp_agent_can_be_allowed_once_always_or_not() {
        let screen = Screen::default();
        let (mut keys, input) = pipe();
        let prompter = Prompter::new(input, Box::new(screen.clone()), None);
        let asker = prompter.acp();
        for (count, (line, answer)) in [
            ("y\n", PermissionAnswer::AllowOnce),
            ("always\n", PermissionAnswer::AllowAlways),
            ("\n", PermissionAnswer::Reject),
        ]
        .into_iter()
        .enumerate()
        {
            let ask = tokio::spawn({
                let asker = Arc::clone(&asker);
                async move {
                    asker
                        .ask(PermissionQuestion {
                            agent: "codex".to_owned(),
                            session: dsh_core::SessionId::generate(),
                            action: "Run `cargo build`".to_owned(),
                            kind: Some("execute".to_owned()),
                        })
                        .await
                }
            });
            until(&screen, "Allow?", count + 1).await;
            keys.write_all(line.as_bytes()).unwrap();
            assert_eq!(ask.await.unwrap(), answer);
        }
        assert!(screen.text().contains(
            "the ACP agent `codex` asks permission for: Run `cargo build` (execute). Allow? [y/a(lways)/N] "
        ));
    }
}
