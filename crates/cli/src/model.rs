//! The model a command uses (`--model`, `DSH_MODEL` or `dsh.toml`'s
//! `model`: `demo` or `<provider>:<model>`), and checking before any session
//! is written that a configured API can be reached at all. The key is read
//! by the client from the variable the provider names (`OPENAI_API_KEY` for
//! `openai`) and never passes through this module; addresses are shown as
//! `scheme://host:port` only, so no credential in a URL reaches a message.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::Model;
use dsh_llm_openai::{ConfigError, OpenAiModel};

use crate::error::CliError;

/// The environment variable naming the API's base URL.
pub const BASE_URL_ENV: &str = "OPENAI_BASE_URL";

/// How long the reachability check may take to connect.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// What drives the agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// The embedded scripted demo: offline, deterministic.
    Demo,
    /// An OpenAI-compatible chat-completions API.
    Api(ApiModel),
}

/// One model of an OpenAI-compatible API, with where and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiModel {
    /// The provider's name (`openai`, or one of `dsh.toml`'s).
    pub provider: String,
    /// The model id sent with every request.
    pub model: String,
    /// The API's base URL.
    pub base_url: String,
    /// The variable holding the key; `None` sends none.
    pub api_key_env: Option<String>,
    /// The file and key that named the variable, for the line that says it
    /// is unset; `None` when a flag or the default named it.
    pub key_origin: Option<(std::path::PathBuf, String)>,
}

impl ModelChoice {
    /// `provider:model`, or `demo`.
    pub fn spec(&self) -> String {
        match self {
            Self::Demo => "demo".to_owned(),
            Self::Api(api) => format!("{}:{}", api.provider, api.model),
        }
    }
}

/// The header extension that records the model a tree was built with.
pub const RUN_EXTENSION: &str = "dsh/run";

/// What a root's header records of `choice`: its spec, and for an API its
/// base URL and the name of its key variable (never a key).
pub fn record(choice: &ModelChoice) -> serde_json::Value {
    match choice {
        ModelChoice::Demo => serde_json::json!({ "model": "demo" }),
        ModelChoice::Api(api) => serde_json::json!({
            "model": choice.spec(),
            "base_url": api.base_url,
            "api_key_env": api.api_key_env,
        }),
    }
}

/// The model a root's header recorded with [`record`], if it recorded a
/// readable one.
pub fn recorded(header: &dsh_core::SessionHeader) -> Option<ModelChoice> {
    let run = header.extensions.get(RUN_EXTENSION)?;
    let spec = run.get("model")?.as_str()?;
    let (provider, model) = parse_spec(spec).ok()?;
    if provider == "demo" {
        return Some(ModelChoice::Demo);
    }
    Some(ModelChoice::Api(ApiModel {
        provider,
        model: model?,
        base_url: run.get("base_url")?.as_str()?.to_owned(),
        api_key_env: run
            .get("api_key_env")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        key_origin: None,
    }))
}

/// Split a model spec into its provider and, when given, its model:
/// `demo`, `<provider>:<model>`, or `<provider>` alone (its default model).
pub fn parse_spec(spec: &str) -> Result<(String, Option<String>), String> {
    let spec = spec.trim();
    if spec.is_empty() || spec == "demo" {
        return Ok(("demo".to_owned(), None));
    }
    let (provider, model) = match spec.split_once(':') {
        Some((provider, model)) => (provider, Some(model)),
        None => (spec, None),
    };
    if provider.is_empty()
        || !provider
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    {
        return Err(
            "expected `<provider>:<model>` (for example `openai:gpt-4o-mini`), a provider of dsh.toml, or `demo`"
                .to_owned(),
        );
    }
    if let Some(model) = model
        && (model.trim().is_empty() || model.chars().any(char::is_whitespace))
    {
        return Err(format!(
            "the model id after `{provider}:` is empty or has spaces"
        ));
    }
    Ok((provider.to_owned(), model.map(str::to_owned)))
}

/// Build the client for an OpenAI-compatible API and check that its address
/// accepts connections, so a bad configuration fails before any session is
/// written.
///
/// # Cancel safety
/// Cancel safe: it writes nothing; a drop abandons the connection check.
pub async fn openai(api: &ApiModel) -> Result<Arc<dyn Model>, CliError> {
    let builder = OpenAiModel::builder(api.model.clone())
        .base_url(api.base_url.clone())
        .named(format!("{}:{}", api.provider, api.model));
    let builder = match &api.api_key_env {
        Some(var) => builder.api_key_env(var.clone()),
        None => builder.without_api_key(),
    };
    let client = builder
        .build()
        .map_err(|err| match (&err, &api.key_origin) {
            (ConfigError::MissingApiKey { var }, Some((file, key))) => CliError::Config {
                file: file.clone(),
                key: key.clone(),
                reason: format!("the environment variable `{var}` is not set"),
            },
            _ => CliError::ModelConfig(err.to_string()),
        })?;
    let endpoint = client.endpoint();
    let host = endpoint.host_str().unwrap_or_default().to_owned();
    let port = endpoint.port_or_known_default().unwrap_or(443);
    preflight(endpoint.scheme(), &host, port).await?;
    Ok(Arc::new(client))
}

/// Connect (TCP only) to the endpoint's host and port.
async fn preflight(scheme: &str, host: &str, port: u16) -> Result<(), CliError> {
    let address = format!("{scheme}://{host}:{port}");
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let connect = tokio::net::TcpStream::connect((host.as_str(), port));
    match tokio::time::timeout(PREFLIGHT_TIMEOUT, connect).await {
        Ok(Ok(_stream)) => Ok(()),
        Ok(Err(err)) => Err(CliError::Unreachable {
            address,
            reason: err.to_string(),
        }),
        Err(_) => Err(CliError::Unreachable {
            address,
            reason: format!("no connection within {} s", PREFLIGHT_TIMEOUT.as_secs()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_specs_parse_or_say_why_not() {
        let ok = |spec: &str| parse_spec(spec).ok();
        assert_eq!(ok(""), Some(("demo".into(), None)));
        assert_eq!(ok(" demo "), Some(("demo".into(), None)));
        assert_eq!(
            ok("openai:gpt-4o-mini"),
            Some(("openai".into(), Some("gpt-4o-mini".into())))
        );
        assert_eq!(ok("deepseek"), Some(("deepseek".into(), None)));
        for bad in ["openai:", "Open AI:x", "openai:a b", ":x"] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_recorded_model_reads_back_and_holds_no_key() {
        let api = ModelChoice::Api(ApiModel {
            provider: "local".into(),
            model: "m".into(),
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key_env: Some("LOCAL_KEY".into()),
            key_origin: None,
        });
        for choice in [ModelChoice::Demo, api] {
            let mut header = dsh_core::SessionHeader::new(
                dsh_core::SessionId::generate(),
                std::path::PathBuf::from("/"),
            );
            header
                .extensions
                .insert(RUN_EXTENSION.to_owned(), record(&choice));
            assert_eq!(recorded(&header), Some(choice));
        }
        let header = dsh_core::SessionHeader::new(
            dsh_core::SessionId::generate(),
            std::path::PathBuf::from("/"),
        );
        assert_eq!(recorded(&header), None);
    }
}
