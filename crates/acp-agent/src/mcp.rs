//! The MCP servers a client passes in `session/new` and `session/load`,
//! as dsh-mcp server configurations for that session's tree. dsh takes
//! stdio servers only (every agent must; `initialize` advertises neither
//! HTTP nor SSE), so a session asked with another transport is refused
//! with an `invalid_params` error naming the server, as is a name dsh
//! cannot offer tools under or one given twice.

use agent_client_protocol::v1::schema::McpServer;
use dsh_mcp::McpServerConfig;

/// The configurations of `servers`, in order.
///
/// # Errors
/// An `invalid_params` error naming the first server that cannot be
/// served: not stdio, a bad name, or a name given twice.
pub(crate) fn configs(
    servers: &[McpServer],
) -> Result<Vec<McpServerConfig>, agent_client_protocol::Error> {
    let mut configs: Vec<McpServerConfig> = Vec::with_capacity(servers.len());
    for server in servers {
        let McpServer::Stdio(stdio) = server else {
            let (name, transport) = match server {
                McpServer::Http(http) => (http.name.as_str(), "HTTP"),
                McpServer::Sse(sse) => (sse.name.as_str(), "SSE"),
                _ => ("?", "this transport"),
            };
            return Err(refused(format!(
                "MCP server `{name}`: dsh takes stdio MCP servers only, not {transport}"
            )));
        };
        if let Some(reason) = dsh_mcp::check_server_name(&stdio.name) {
            return Err(refused(format!("MCP server `{}`: {reason}", stdio.name)));
        }
        if configs.iter().any(|config| config.name == stdio.name) {
            return Err(refused(format!(
                "MCP server `{}` is given twice",
                stdio.name
            )));
        }
        let mut config = McpServerConfig::command(stdio.name.clone(), stdio.command.clone())
            .args(stdio.args.clone());
        if let dsh_mcp::Endpoint::Command { env, .. } = &mut config.endpoint {
            env.extend(
                stdio
                    .env
                    .iter()
                    .map(|var| (var.name.clone(), var.value.clone())),
            );
        }
        configs.push(config);
    }
    Ok(configs)
}

fn refused(why: String) -> agent_client_protocol::Error {
    agent_client_protocol::Error::invalid_params().data(why)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use agent_client_protocol::v1::schema::{EnvVariable, McpServerHttp, McpServerStdio};
    use proptest::prelude::*;

    fn stdio(name: &str) -> McpServer {
        McpServer::Stdio(
            McpServerStdio::new(name, "/usr/bin/server")
                .args(vec!["--flag".to_owned()])
                .env(vec![EnvVariable::new("TOKEN", "t")]),
        )
    }

    #[test]
    fn a_stdio_server_becomes_a_command_with_its_arguments_and_variables() {
        let configs = configs(&[stdio("fs")]).unwrap();
        assert_eq!(configs.len(), 1);
        assert_eq!(configs[0].name, "fs");
        let dsh_mcp::Endpoint::Command {
            command, args, env, ..
        } = &configs[0].endpoint
        else {
            panic!("not a command: {:?}", configs[0].endpoint);
        };
        assert_eq!(command, std::path::Path::new("/usr/bin/server"));
        assert_eq!(args, &["--flag"]);
        assert_eq!(env.get("TOKEN").map(String::as_str), Some("t"));
    }

    #[test]
    fn http_servers_bad_names_and_twice_given_names_are_refused() {
        let http = McpServer::Http(McpServerHttp::new("web", "https://example.com/mcp"));
        for servers in [vec![http], vec![stdio("a.b")], vec![stdio("x"), stdio("x")]] {
            let err = configs(&servers).unwrap_err();
            assert_eq!(
                err.code,
                agent_client_protocol::Error::invalid_params().code
            );
        }
    }

    proptest! {
        #[test]
        fn distinct_good_names_all_pass_in_order(names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}", 0..6)) {
            let servers: Vec<_> = names.iter().map(|name| stdio(name)).collect();
            let got: Vec<_> = configs(&servers).unwrap().into_iter().map(|config| config.name).collect();
            prop_assert_eq!(got, names.into_iter().collect::<Vec<_>>());
        }
    }
}
