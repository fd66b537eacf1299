//! Choosing the model from `--model` (or `DSH_MODEL`) and the environment,
//! and checking before any session is written that a configured API can be
//! reached at all. The key is read by the client from `OPENAI_API_KEY` and
//! never passes through this module; addresses are shown as
//! `scheme://host:port` only, so no credential in a URL reaches a message.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::Model;
use dsh_llm_openai::{DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, OpenAiModel};

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
    OpenAi {
        /// The model id sent with every request.
        model: String,
    },
}

/// Parse `--model`: `openai:<model>`, or `demo`; absent means the demo.
pub fn parse_choice(spec: Option<&str>) -> Result<ModelChoice, CliError> {
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(ModelChoice::Demo);
    };
    let bad = |reason: &str| CliError::BadModel {
        spec: spec.to_owned(),
        reason: reason.to_owned(),
    };
    if spec == "demo" {
        return Ok(ModelChoice::Demo);
    }
    let Some((provider, model)) = spec.split_once(':') else {
        return Err(bad(
            "expected `openai:<model>` (for example `openai:gpt-4o-mini`) or `demo`",
        ));
    };
    match provider {
        "openai" => {
            if model.trim().is_empty() || model.chars().any(char::is_whitespace) {
                Err(bad("the model id after `openai:` is empty or has spaces"))
            } else {
                Ok(ModelChoice::OpenAi {
                    model: model.to_owned(),
                })
            }
        }
        other => Err(bad(&format!(
            "unknown provider `{other}`; the only one is `openai` (any OpenAI-compatible API, through {BASE_URL_ENV})"
        ))),
    }
}

/// Build the client for an OpenAI-compatible API and check that its address
/// accepts connections, so a bad configuration fails before any session is
/// written.
pub async fn openai(model: &str) -> Result<Arc<dyn Model>, CliError> {
    let base = std::env::var(BASE_URL_ENV)
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
    let client = OpenAiModel::builder(model)
        .base_url(base)
        .api_key_env(DEFAULT_API_KEY_ENV)
        .build()
        .map_err(|err| CliError::ModelConfig(err.to_string()))?;
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
        assert_eq!(parse_choice(None).ok(), Some(ModelChoice::Demo));
        assert_eq!(parse_choice(Some(" ")).ok(), Some(ModelChoice::Demo));
        assert_eq!(parse_choice(Some("demo")).ok(), Some(ModelChoice::Demo));
        assert_eq!(
            parse_choice(Some("openai:gpt-4o-mini")).ok(),
            Some(ModelChoice::OpenAi {
                model: "gpt-4o-mini".into()
            })
        );
        for bad in ["gpt-4o", "openai:", "anthropic:claude", "openai:a b"] {
            let err = parse_choice(Some(bad)).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.starts_with("bad --model")),
                "{bad}: {err:?}"
            );
        }
    }
}
