//! The [`Model`] implementation: configuration, the request with its retries,
//! and the response stream with its idle timeout and cancellation. Every
//! wait here races the request's cancellation token, and every error text is
//! built by this module from status lines, transport failures and the
//! server's own (redacted) error message: never from the key, the request
//! headers or the request body.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use dsh_core::{Model, ModelError, ModelErrorKind, ModelEvent, ModelRequest, ModelStream};
use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Response, StatusCode, Url};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::decode::{StreamDecoder, error_message};
use crate::redact::redact;
use crate::retry::{RetryPolicy, retry_after, retryable_status};
use crate::wire::{self, TokenLimitField};

/// The base URL used when none is set: OpenAI's API.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The environment variable the API key is read from unless another is named.
pub const DEFAULT_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// How long establishing a connection may take, unless set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the server may stay silent (before the response headers, or
/// between two chunks of the body) unless set. Servers that think for a long
/// time send keep-alive comments, which count as traffic.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The most of an error response body read, in bytes.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// An API key. Its `Debug` output is redacted and it has no `Display`, so it
/// cannot end up in a log or an error by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wrap `key`.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// A configuration that cannot make a working client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The environment variable that should hold the key is unset or empty.
    #[error("no API key: the environment variable `{var}` is not set")]
    MissingApiKey {
        /// The variable's name.
        var: String,
    },
    /// The key cannot be sent in an HTTP header (control characters, or not
    /// Unicode in the environment). The key itself is never quoted.
    #[error("the API key {origin} is not a valid HTTP header value")]
    InvalidApiKey {
        /// Where the key came from, for example "in `OPENAI_API_KEY`".
        origin: String,
    },
    /// The base URL does not parse or is not `http`/`https`.
    #[error("invalid base URL: {reason}")]
    InvalidBaseUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built (for example, no TLS roots).
    #[error("the HTTP client could not be built: {0}")]
    Client(String),
}

impl ConfigError {
    /// A stable code for the error: `MISSING_API_KEY`, `INVALID_API_KEY`,
    /// `INVALID_BASE_URL` or `HTTP_CLIENT`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingApiKey { .. } => "MISSING_API_KEY",
            Self::InvalidApiKey { .. } => "INVALID_API_KEY",
            Self::InvalidBaseUrl { .. } => "INVALID_BASE_URL",
            Self::Client(_) => "HTTP_CLIENT",
        }
    }
}

/// Where the key comes from.
#[derive(Debug, Clone)]
enum KeySource {
    Env(String),
    Key(ApiKey),
    None,
}

/// Configures an [`OpenAiModel`]; see [`OpenAiModel::builder`].
#[derive(Debug, Clone)]
pub struct OpenAiBuilder {
    model: String,
    base_url: String,
    key: KeySource,
    name: Option<String>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    retry: RetryPolicy,
    accepts_images: bool,
    token_limit_field: TokenLimitField,
}

impl OpenAiBuilder {
    /// The API's base URL, the part before `/chat/completions`: for example
    /// `https://api.deepseek.com`, `http://localhost:11434/v1` (Ollama) or
    /// `http://localhost:8000/v1` (vLLM). Default [`DEFAULT_BASE_URL`].
    #[must_use]
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = url.into();
        self
    }

    /// Read the key from the environment variable `var` when the model is
    /// built (the default, with [`DEFAULT_API_KEY_ENV`]).
    #[must_use]
    pub fn api_key_env(mut self, var: impl Into<String>) -> Self {
        self.key = KeySource::Env(var.into());
        self
    }

    /// Use `key` as the API key.
    #[must_use]
    pub fn api_key(mut self, key: impl Into<ApiKey>) -> Self {
        self.key = KeySource::Key(key.into());
        self
    }

    /// Send no `Authorization` header (local servers such as Ollama or vLLM
    /// that need no key).
    #[must_use]
    pub fn without_api_key(mut self) -> Self {
        self.key = KeySource::None;
        self
    }

    /// The name shown in logs and diagnostics (default `openai:<model>`).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// How long establishing a connection may take (default [`DEFAULT_CONNECT_TIMEOUT`]).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long the server may stay silent before the response headers or
    /// between chunks (default [`DEFAULT_IDLE_TIMEOUT`]).
    #[must_use]
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// The retry policy (default [`RetryPolicy::default`]).
    #[must_use]
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Whether the model accepts images (default `false`: many compatible
    /// servers reject image parts).
    #[must_use]
    pub fn accepting_images(mut self, yes: bool) -> Self {
        self.accepts_images = yes;
        self
    }

    /// Which field carries the output-token cap (default `max_tokens`).
    #[must_use]
    pub fn token_limit_field(mut self, field: TokenLimitField) -> Self {
        self.token_limit_field = field;
        self
    }

    /// Build the model, reading the key from the environment if so configured.
    ///
    /// # Errors
    /// [`ConfigError`] for a missing or unusable key, a bad base URL, or an
    /// HTTP client that cannot be built.
    pub fn build(self) -> Result<OpenAiModel, ConfigError> {
        let base = Url::parse(self.base_url.trim()).map_err(|err| ConfigError::InvalidBaseUrl {
            reason: err.to_string(),
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ConfigError::InvalidBaseUrl {
                reason: format!("the scheme must be http or https, not `{}`", base.scheme()),
            });
        }
        let endpoint_text = format!("{}/chat/completions", base.as_str().trim_end_matches('/'));
        let endpoint = Url::parse(&endpoint_text).map_err(|err| ConfigError::InvalidBaseUrl {
            reason: err.to_string(),
        })?;
        let (key, key_env) = match self.key {
            KeySource::None => (None, None),
            KeySource::Key(key) => (Some(key), None),
            KeySource::Env(var) => match std::env::var(&var) {
                Ok(key) if !key.trim().is_empty() => {
                    (Some(ApiKey(key.trim().to_owned())), Some(var))
                }
                Ok(_) | Err(std::env::VarError::NotPresent) => {
                    return Err(ConfigError::MissingApiKey { var });
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(ConfigError::InvalidApiKey {
                        origin: format!("in `{var}`"),
                    });
                }
            },
        };
        let authorization = match &key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| ConfigError::InvalidApiKey {
                        origin: key_env
                            .as_ref()
                            .map_or_else(|| "given".to_owned(), |var| format!("in `{var}`")),
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls_config()?)
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("dsh-llm-openai/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| ConfigError::Client(describe(&err)))?;
        Ok(OpenAiModel {
            name: self
                .name
                .unwrap_or_else(|| format!("openai:{}", self.model)),
            model: self.model,
            endpoint,
            key,
            key_env,
            authorization,
            http,
            idle_timeout: self.idle_timeout,
            retry: self.retry,
            accepts_images: self.accepts_images,
            token_limit_field: self.token_limit_field,
        })
    }
}

/// A [`Model`] over an OpenAI-compatible chat-completions endpoint.
///
/// Cheap to clone (the HTTP client's connection pool is shared). The model
/// id of a request ([`ModelRequest::model`]) wins over the configured one.
#[derive(Clone)]
pub struct OpenAiModel {
    name: String,
    model: String,
    endpoint: Url,
    key: Option<ApiKey>,
    key_env: Option<String>,
    authorization: Option<HeaderValue>,
    http: reqwest::Client,
    idle_timeout: Duration,
    retry: RetryPolicy,
    accepts_images: bool,
    token_limit_field: TokenLimitField,
}

impl fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut endpoint = self.endpoint.clone();
        // Credentials in the URL are shown no more than the key.
        let _ = endpoint.set_password(None);
        let _ = endpoint.set_username("");
        endpoint.set_query(None);
        f.debug_struct("OpenAiModel")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("endpoint", &endpoint.as_str())
            .field("key", &self.key)
            .field("key_env", &self.key_env)
            .field("idle_timeout", &self.idle_timeout)
            .field("retry", &self.retry)
            .field("accepts_images", &self.accepts_images)
            .field("token_limit_field", &self.token_limit_field)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// A builder for `model` (for example `gpt-4o-mini` or `deepseek-chat`)
    /// on OpenAI's API with the key from `OPENAI_API_KEY`, a 10 s connect
    /// timeout, a 120 s idle timeout and the default retry policy.
    pub fn builder(model: impl Into<String>) -> OpenAiBuilder {
        OpenAiBuilder {
            model: model.into(),
            base_url: DEFAULT_BASE_URL.to_owned(),
            key: KeySource::Env(DEFAULT_API_KEY_ENV.to_owned()),
            name: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            retry: RetryPolicy::default(),
            accepts_images: false,
            token_limit_field: TokenLimitField::default(),
        }
    }

    /// The configured model id.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    fn redact(&self, text: &str) -> String {
        redact(text, self.key.as_ref().map(ApiKey::expose))
    }

    /// One attempt: the response if it is a stream, or why not.
    async fn attempt(&self, body: &[u8], cancel: &CancellationToken) -> Result<Response, Failure> {
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(body.to_vec());
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        let sent = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(Failure::fatal(cancelled())),
            sent = tokio::time::timeout(self.idle_timeout, request.send()) => sent,
        };
        let response = match sent {
            Err(_) => {
                return Err(Failure::retry(transport(format!(
                    "no response within {:?}",
                    self.idle_timeout
                ))));
            }
            Ok(Err(err)) => {
                let error = transport(self.redact(&format!(
                    "the request could not be sent: {}",
                    describe(&err)
                )));
                // A TLS failure (an untrusted or mismatched certificate, no
                // protocol in common) is a fact of the configuration that a
                // retry seconds later will not change.
                return Err(if err.is_builder() || is_tls(&err) {
                    Failure::fatal(error)
                } else {
                    Failure::retry(error)
                });
            }
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            let json = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|value| value.to_str().ok())
                .is_some_and(|value| value.trim_start().starts_with("application/json"));
            if !json {
                return Ok(response);
            }
            // A server that ignored `stream: true`, or reports an error with a 200.
            let text = self.read_body(response, cancel).await?;
            let error = match serde_json::from_str::<Value>(&text) {
                Ok(value) if value.get("error").is_some() => ModelError::new(
                    ModelErrorKind::Api,
                    self.redact(&format!(
                        "the server reported an error: {}",
                        value.get("error").map(error_message).unwrap_or_default()
                    )),
                ),
                _ => ModelError::new(
                    ModelErrorKind::Protocol,
                    "the server answered with JSON, not an event stream (does it support `stream: true`?)",
                ),
            };
            return Err(Failure::fatal(error));
        }
        let wait = retry_after(response.headers(), SystemTime::now());
        let text = self.read_body(response, cancel).await?;
        let error = self.status_error(status, &text);
        Err(if retryable_status(status) {
            Failure {
                error,
                retry: true,
                wait,
            }
        } else {
            Failure::fatal(error)
        })
    }

    /// The body of an error response, bounded in size and time.
    async fn read_body(
        &self,
        mut response: Response,
        cancel: &CancellationToken,
    ) -> Result<String, Failure> {
        let mut bytes = Vec::new();
        while bytes.len() < MAX_ERROR_BODY {
            let chunk = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(Failure::fatal(cancelled())),
                chunk = tokio::time::timeout(self.idle_timeout, response.chunk()) => chunk,
            };
            match chunk {
                Ok(Ok(Some(chunk))) => bytes.extend_from_slice(&chunk),
                // A body we cannot finish reading still has a status worth reporting.
                Ok(Ok(None) | Err(_)) | Err(_) => break,
            }
        }
        bytes.truncate(MAX_ERROR_BODY);
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The error for a non-success `status` with body `text`.
    fn status_error(&self, status: StatusCode, text: &str) -> ModelError {
        let detail = match serde_json::from_str::<Value>(text) {
            Ok(value) => error_message(value.get("error").unwrap_or(&value)),
            Err(_) => text.to_owned(),
        };
        let mut message = format!("HTTP {status}");
        if !detail.trim().is_empty() {
            message.push_str(": ");
            message.push_str(detail.trim());
        }
        let hint = match status.as_u16() {
            401 | 403 => Some(match &self.key_env {
                Some(var) => format!("check the API key in `{var}`"),
                None if self.key.is_some() => "check the API key".to_owned(),
                None => "the server wants an API key and none is configured".to_owned(),
            }),
            404 => Some(format!(
                "check the base URL and the model id (posted to {})",
                self.endpoint.path()
            )),
            _ => None,
        };
        let mut message = self.redact(&message);
        if let Some(hint) = hint {
            message.push_str(" (");
            message.push_str(&hint);
            message.push(')');
        }
        ModelError::new(ModelErrorKind::Api, message)
    }

    /// Send `body`, retrying failures that happen before any output.
    async fn send(&self, body: &[u8], cancel: &CancellationToken) -> Result<Response, ModelError> {
        let attempts = self.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match self.attempt(body, cancel).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            let mut error = failure.error;
            if !failure.retry {
                return Err(error);
            }
            if attempt >= attempts {
                if attempts > 1 {
                    error
                        .message
                        .push_str(&format!(" (gave up after {attempts} attempts)"));
                }
                return Err(error);
            }
            let wait = match failure.wait {
                Some(wait) if wait > self.retry.max_retry_after => {
                    error.message.push_str(&format!(
                        " (the server asked to retry after {}s, longer than the {}s allowed)",
                        wait.as_secs(),
                        self.retry.max_retry_after.as_secs()
                    ));
                    return Err(error);
                }
                Some(wait) => wait,
                None => self.retry.backoff(attempt),
            };
            tracing::warn!(
                model = %self.name,
                attempt,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "model request failed, retrying: {error}"
            );
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(cancelled()),
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// Why an attempt failed and whether another may succeed.
struct Failure {
    error: ModelError,
    retry: bool,
    /// The wait the server asked for, if it did.
    wait: Option<Duration>,
}

impl Failure {
    fn fatal(error: ModelError) -> Self {
        Self {
            error,
            retry: false,
            wait: None,
        }
    }

    fn retry(error: ModelError) -> Self {
        Self {
            error,
            retry: true,
            wait: None,
        }
    }
}

/// The message of the error a request yields when its token is cancelled.
pub(crate) const CANCELLED_MESSAGE: &str = "the request was cancelled";

fn cancelled() -> ModelError {
    ModelError::new(ModelErrorKind::Cancelled, CANCELLED_MESSAGE)
}

fn transport(message: impl Into<String>) -> ModelError {
    ModelError::new(ModelErrorKind::Transport, message)
}

/// A transport error and its causes, without the URL.
fn describe(err: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = source {
        let piece = match current.downcast_ref::<reqwest::Error>() {
            Some(err) if err.url().is_some() => {
                // `without_url` needs ownership; describe the kind instead.
                if err.is_timeout() {
                    "timed out".to_owned()
                } else if err.is_connect() {
                    "could not connect".to_owned()
                } else if err.is_body() || err.is_decode() {
                    "the response body failed".to_owned()
                } else {
                    "the request failed".to_owned()
                }
            }
            _ => current.to_string(),
        };
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&piece);
        source = current.source();
    }
    text
}

/// Whether a transport error was a TLS failure: a `rustls` error among its
/// causes. An I/O error wraps its cause where `source` does not reach (it
/// skips to the cause's own source), so each one is opened with `get_ref`.
fn is_tls(err: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(current) = source {
        if current.is::<rustls::Error>() {
            return true;
        }
        source = match current
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
        {
            Some(inner) => Some(inner),
            None => current.source(),
        };
    }
    false
}

/// The state of one response stream.
struct Streaming {
    response: Option<Response>,
    decoder: StreamDecoder,
    pending: VecDeque<Result<ModelEvent, ModelError>>,
    scratch: Vec<ModelEvent>,
    cancel: CancellationToken,
    idle_timeout: Duration,
    key: Option<ApiKey>,
    model: String,
    done: bool,
}

impl Streaming {
    /// End the stream with `error` (the connection closes with the response).
    fn fail(mut self, error: ModelError) -> Option<(Result<ModelEvent, ModelError>, Self)> {
        self.response = None;
        self.done = true;
        self.pending.clear();
        Some((Err(error), self))
    }

    fn take_scratch(&mut self, result: Result<(), ModelError>) {
        self.pending.extend(self.scratch.drain(..).map(Ok));
        if let Err(mut error) = result {
            error.message = redact(&error.message, self.key.as_ref().map(ApiKey::expose));
            self.pending.push_back(Err(error));
        }
    }

    async fn next(mut self) -> Option<(Result<ModelEvent, ModelError>, Self)> {
        loop {
            if self.done {
                return None;
            }
            if self.cancel.is_cancelled() {
                return self.fail(cancelled());
            }
            if let Some(item) = self.pending.pop_front() {
                match &item {
                    Ok(ModelEvent::Finish(_)) => {
                        if self.decoder.reasoning_chars() > 0 {
                            tracing::debug!(
                                model = %self.model,
                                chars = self.decoder.reasoning_chars(),
                                "reasoning content received and not shown"
                            );
                        }
                        self.response = None;
                        self.done = true;
                    }
                    Err(_) => {
                        self.response = None;
                        self.done = true;
                    }
                    Ok(_) => {}
                }
                return Some((item, self));
            }
            let response = self.response.as_mut()?;
            let idle = self.idle_timeout;
            let chunk = tokio::select! {
                biased;
                () = self.cancel.cancelled() => return self.fail(cancelled()),
                chunk = tokio::time::timeout(idle, response.chunk()) => chunk,
            };
            match chunk {
                Err(_) => {
                    return self.fail(transport(format!(
                        "the server sent nothing for {idle:?} in the middle of the response"
                    )));
                }
                Ok(Err(err)) => {
                    let message = format!("the connection failed mid-response: {}", describe(&err));
                    let message = redact(&message, self.key.as_ref().map(ApiKey::expose));
                    return self.fail(transport(message));
                }
                Ok(Ok(Some(bytes))) => {
                    let result = self.decoder.feed(&bytes, &mut self.scratch);
                    self.take_scratch(result);
                }
                Ok(Ok(None)) => {
                    self.response = None;
                    let result = self.decoder.end(&mut self.scratch);
                    self.take_scratch(result);
                }
            }
        }
    }
}

#[async_trait]
impl Model for OpenAiModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    /// Post the request, retrying failures before any output, and return
    /// the response stream once the server has answered with one.
    ///
    /// # Cancel safety
    /// Cancelling `cancel`, dropping this future or dropping the stream
    /// closes the connection; while the stream is polled, a cancelled token
    /// ends it with a [`ModelErrorKind::Cancelled`] error at once.
    async fn stream(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        if cancel.is_cancelled() {
            return Err(cancelled());
        }
        let body = serde_json::to_vec(&wire::body(&request, &self.model, self.token_limit_field))
            .map_err(|err| {
            ModelError::new(
                ModelErrorKind::Protocol,
                format!("the request could not be encoded: {err}"),
            )
        })?;
        drop(request);
        tracing::debug!(model = %self.name, bytes = body.len(), "model request");
        let response = self.send(&body, &cancel).await?;
        let state = Streaming {
            response: Some(response),
            decoder: StreamDecoder::new(),
            pending: VecDeque::new(),
            scratch: Vec::new(),
            cancel,
            idle_timeout: self.idle_timeout,
            key: self.key.clone(),
            model: self.name.clone(),
            done: false,
        };
        Ok(futures::stream::unfold(state, Streaming::next).boxed())
    }
}

/// TLS for the client: rustls on the `ring` provider, certificates checked by
/// the platform verifier (the system's roots). Built per client, so nothing
/// process-wide (no default crypto provider) is installed or assumed.
/// Public so that dsh's other HTTP clients (MCP servers reached by URL)
/// check certificates the same way.
///
/// # Errors
/// [`ConfigError::Client`] when rustls cannot be set up.
#[cfg(feature = "platform-verifier")]
pub fn tls_config() -> Result<rustls::ClientConfig, ConfigError> {
    use rustls_platform_verifier::BuilderVerifierExt as _;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_platform_verifier())
        .map(|builder| builder.with_no_client_auth())
        .map_err(|err| ConfigError::Client(format!("TLS set-up failed: {err}")))
}

/// The bundled Mozilla roots (`webpki-roots` feature, without the platform
/// verifier): for a container with no system certificates.
///
/// # Errors
/// [`ConfigError::Client`] when rustls cannot be set up.
#[cfg(all(feature = "webpki-roots", not(feature = "platform-verifier")))]
pub fn tls_config() -> Result<rustls::ClientConfig, ConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
        .map_err(|err| ConfigError::Client(format!("TLS set-up failed: {err}")))
}

#[cfg(not(any(feature = "platform-verifier", feature = "webpki-roots")))]
compile_error!(
    "dsh-llm-openai needs a source of TLS roots: enable `platform-verifier` (the default) or `webpki-roots`"
);
