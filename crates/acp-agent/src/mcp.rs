//! The MCP servers a client passes in `session/new` and `session/load`,
//! as dsh-mcp server configurations for that session's tree: a stdio
//! server becomes a command with its arguments and variables, an HTTP one
//! a streamable-HTTP URL with its headers (sent as the client gave them,
//! never expanded). `initialize` advertises HTTP and not SSE, so an SSE
//! server is refused with an `invalid_params` error naming it, as is a
//! name dsh cannot offer tools under, one given twice, or a header that
//! cannot be sent.

use agent_client_protocol::v1::schema::McpServer;
use dsh_mcp::McpServerConfig;

/// The configurations of `servers`, in order.
///
/// # Errors
/// An `invalid_params` error naming the first server that cannot be
/// served: SSE, a bad name, a name given twice, or a bad header.
pub(crate) fn configs(
    servers: &[McpServer],
) -> Result<Vec<McpServerConfig>, agent_client_protocol::Error> {
    let mut configs: Vec<McpServerConfig> = Vec::with_capacity(servers.len());
    for server in servers {
        let config = match server {
            McpServer::Stdio(stdio) => {
                let mut config =
                    McpServerConfig::command(stdio.name.clone(), stdio.command.clone())
                        .args(stdio.args.clone());
                if let dsh_mcp::Endpoint::Command { env, .. } = &mut config.endpoint {
                    env.extend(
                        stdio
                            .env
                            .iter()
                            .map(|var| (var.name.clone(), var.value.clone())),
                    );
                }
                config
            }
            McpServer::Http(http) => {
                let mut config = McpServerConfig::url(http.name.clone(), http.url.clone());
                for header in &http.headers {
                    if let Some(reason) = dsh_mcp::check_header(&header.name, &header.value) {
                        return Err(refused(format!(
                            "MCP server `{}`: header `{}`: {reason}",
                            http.name, header.name
                        )));
                    }
                    config = config.header(header.name.clone(), header.value.clone());
                }
                config
            }
            McpServer::Sse(sse) => {
                return Err(refused(format!(
                    "MCP server `{}`: dsh takes stdio and streamable-HTTP MCP servers, not SSE",
                    sse.name
                )));
            }
            _ => {
                return Err(refused(
                    "an MCP server of a transport dsh does not know (it takes stdio and streamable HTTP)"
                        .to_owned(),
                ));
            }
        };
        if let Some(reason) = dsh_mcp::check_server_name(&config.name) {
            return Err(refused(format!("MCP server `{}`: {reason}", config.name)));
        }
        if configs.iter().any(|known| known.name == config.name) {
            return Err(refused(format!(
                "MCP server `{}` is given twice",
                config.name
            )));
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
    use agent_client_protocol::v1::schema::{
        EnvVariable, HttpHeader, McpServerHttp, McpServerSse, McpServerStdio,
    };
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
    fn an_http_server_becomes_a_url_with_the_clients_headers_as_given() {
        let http = McpServer::Http(
            McpServerHttp::new("web", "https://example.com/mcp").headers(vec![
                HttpHeader::new("Authorization", "Bearer ${NOT_EXPANDED}"),
                HttpHeader::new("X-Trace", "on"),
            ]),
        );
        let configs = configs(&[http, stdio("fs")]).unwrap();
        let dsh_mcp::Endpoint::Url { url, headers } = &configs[0].endpoint else {
            panic!("not a URL: {:?}", configs[0].endpoint);
        };
        assert_eq!(url, "https://example.com/mcp");
        assert_eq!(headers["Authorization"], "Bearer ${NOT_EXPANDED}");
        assert_eq!(headers["X-Trace"], "on");
        assert_eq!(configs[1].name, "fs");
    }

    #[test]
    fn sse_servers_bad_headers_bad_names_and_twice_given_names_are_refused() {
        let sse = McpServer::Sse(McpServerSse::new("feed", "https://example.com/sse"));
        let bad_header = McpServer::Http(
            McpServerHttp::new("web", "https://example.com/mcp")
                .headers(vec![HttpHeader::new("X-Token", "a\nb")]),
        );
        for (servers, said) in [
            (
                vec![sse],
                "MCP server `feed`: dsh takes stdio and streamable-HTTP MCP servers, not SSE",
            ),
            (
                vec![bad_header],
                "MCP server `web`: header `X-Token`: a header value is non-empty visible ASCII (spaces and tabs allowed)",
            ),
            (
                vec![stdio("a.b")],
                "MCP server `a.b`: a server name holds only ASCII letters, digits, `-` and `_`",
            ),
            (
                vec![stdio("x"), stdio("x")],
                "MCP server `x` is given twice",
            ),
        ] {
            let err = configs(&servers).unwrap_err();
            assert_eq!(
                err.code,
                agent_client_protocol::Error::invalid_params().code
            );
            assert_eq!(err.data, Some(serde_json::json!(said)));
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
