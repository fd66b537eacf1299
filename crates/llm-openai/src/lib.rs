#![doc = include_str!("../README.md")]

mod client;
mod decode;
mod redact;
mod retry;
mod sse;
mod wire;

pub use client::{
    ApiKey, ConfigError, DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, OpenAiBuilder, OpenAiModel, tls_config,
};
pub use decode::StreamDecoder;
pub use retry::RetryPolicy;
pub use wire::TokenLimitField;
