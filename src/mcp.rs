//! A real MCP client (rmcp over streamable HTTP) acting as one entity.
//!
//! Each entity the suite drives talks to its gateway exactly as an agent would: through `/mcp`,
//! with its bearer token. Tool results come back as the tool's structured JSON.

use rmcp::model::CallToolRequestParams;
use rmcp::service::{Peer, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;

/// An MCP failure: transport, protocol, or a tool-level error.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot connect MCP client to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("MCP call {tool} failed: {reason}")]
    Call { tool: String, reason: String },
    #[error("tool {tool} returned an error: {content}")]
    Tool { tool: String, content: String },
}

/// One entity's MCP session.
pub struct McpClient {
    service: RunningService<RoleClient, ()>,
}

/// A cheap handle for calls from other tasks (a blocking `bridge_send` runs in the background).
#[derive(Clone)]
pub struct McpHandle {
    peer: Peer<RoleClient>,
}

impl McpClient {
    /// Connects to `url` (…/mcp) with the entity's bearer token and completes the MCP handshake.
    pub async fn connect(url: &str, token: &str) -> Result<McpClient, McpError> {
        let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(token.to_string());
        let transport = StreamableHttpClientTransport::from_config(config);
        let service = ().serve(transport).await.map_err(|e| McpError::Connect {
            url: url.to_string(),
            reason: e.to_string(),
        })?;
        Ok(McpClient { service })
    }

    pub fn handle(&self) -> McpHandle {
        McpHandle {
            peer: self.service.peer().clone(),
        }
    }

    /// Names of the tools the server lists.
    pub async fn tool_names(&self) -> Result<Vec<String>, McpError> {
        let tools = self.service.peer().list_all_tools().await.map_err(|e| McpError::Call {
            tool: "tools/list".into(),
            reason: e.to_string(),
        })?;
        Ok(tools.into_iter().map(|t| t.name.to_string()).collect())
    }

    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, McpError> {
        self.handle().call(tool, args).await
    }
}

impl McpHandle {
    /// Calls `tool` with `args` (a JSON object) and returns its structured result.
    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, McpError> {
        let arguments = args.as_object().cloned().unwrap_or_default();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let result = self.peer.call_tool(params).await.map_err(|e| McpError::Call {
            tool: tool.to_string(),
            reason: e.to_string(),
        })?;
        let text = || {
            result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect::<Vec<_>>()
                .join("\n")
        };
        if result.is_error == Some(true) {
            return Err(McpError::Tool {
                tool: tool.to_string(),
                content: text(),
            });
        }
        match result.structured_content.clone() {
            Some(v) => Ok(v),
            None => serde_json::from_str(&text()).map_err(|e| McpError::Tool {
                tool: tool.to_string(),
                content: format!("result is not JSON ({e}): {}", text()),
            }),
        }
    }
}
