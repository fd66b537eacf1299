//! `dsh-llm-openai` is a [`dsh_core::Model`] over the OpenAI-compatible
//! chat-completions API with streaming (server-sent events), so an agent can
//! drive OpenAI, DeepSeek, vLLM, Ollama or any compatible server: build an
//! [`OpenAiModel`] with a base URL, a model id and an API key (from an
//! environment variable, by default `OPENAI_API_KEY`, or given directly).
//!
//! A response streams as the agent loop expects it: text deltas as they
//! arrive, then the tool calls assembled from their streamed fragments, the
//! usage once, and the finish reason last. Requests that fail before any
//! output (a 429, a 5xx, a connection that could not be made) are retried
//! with exponential backoff and jitter, honouring `Retry-After`, within a
//! [`RetryPolicy`]; a response that has begun streaming is never retried.
//! The connection is closed as soon as the request's cancellation token
//! fires or its stream is dropped, and a server that goes quiet for longer
//! than the idle timeout fails the request.
//!
//! This crate must never put the API key in an error, a log line or a
//! `Debug` output: every error text that could echo it (a server's error
//! message above all) is redacted first.

mod client;
mod decode;
mod redact;
mod retry;
mod sse;
mod wire;

pub use client::{
    ApiKey, ConfigError, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, OpenAiBuilder, OpenAiModel,
};
pub use decode::StreamDecoder;
pub use retry::RetryPolicy;
pub use wire::TokenLimitField;
