@mcp-clients @C-22
Feature: Real MCP clients — what tools/list offers each role, and how a session ends (SPEC §15 [C-22], [C-24])

  An MCP client (Claude Code, the official SDKs) offers its model only the tools tools/list
  returned, builds the model's arguments from each listed input schema, and ends its session with
  DELETE /mcp. What is judged is written in CONTRACT §3 ("Tools as MCP clients see them").

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "a" also runs an orchestrator "boss"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @FWD-3 @RPL-2 @RPL-4 @ASK-5 @BRD-1 @SPN-1
  Scenario: a main is listed every tool a main may call, each with the contract's arguments
    Then "lead" is listed every tool a main may call
    And each tool listed to "lead" takes exactly the arguments the contract's schema takes
    And "lead" is refused each tool a main may not call, called by name

  @BRD-1 @SPN-1 @C-24
  Scenario: an orchestrator is listed every tool an orchestrator may call, each with the contract's arguments
    Then "boss" is listed every tool an orchestrator may call
    And each tool listed to "boss" takes exactly the arguments the contract's schema takes
    And "boss" is refused each tool an orchestrator may not call, called by name

  @RPL-1 @ASK-1
  Scenario: a worker is listed every tool a worker may call, and is refused a main's tools
    Then "w1" is listed every tool a worker may call
    And each tool listed to "w1" takes exactly the arguments the contract's schema takes
    And "w1" is refused each tool a worker may not call, called by name

  @FWD-3 @mcp-sdk
  Scenario: the official MCP Python SDK lists, calls and ends its session
    Given "w1" is idle
    When "lead" uses the official MCP Python SDK to list its tools, read the roster and send "brief from the python sdk" to "w1" without waiting for a reply
    Then the SDK was listed bridge_roster and bridge_send, read the roster, and the send was "injected"
    And herdr on "b" records exactly 1 inject into "w1" with text "brief from the python sdk"
    And the SDK's DELETE /mcp was answered 200, 204 or 405, and the SDK logged no failed session end

  # SPEC [C-24]: an orchestrator pulls over MCP like a main, with a main's results.
  @C-24 @RPL-2 @FWD-3 @RPL-1
  Scenario: an orchestrator's send that waits for the reply gets its worker's reply, and a later reply is drained by its poll once
    Given host "b" also runs a worker "w9" whose parent is "boss"
    And "w9" is idle
    When "boss" sends "an orchestrated brief" to "w9" and waits for the reply
    Then herdr on "b" records exactly 1 inject into "w9" with text "an orchestrated brief"
    When "w9" replies "an orchestrated reply"
    Then the send returns "injected" with reply "an orchestrated reply" within 10 seconds
    When "w9" replies "a later reply"
    And "boss" is waiting for a message
    Then the wait returns a REPLY from "w9" with text "a later reply" within 10 seconds
    When "w9" replies "one more reply"
    Then within 10 seconds the inbox of "boss" holds 0 ready and 1 unacknowledged message
    When "boss" polls messages from "w9"
    Then "boss" gets exactly 1 message
    And message 1 is a REPLY from "w9" with text "one more reply"
    When "boss" polls all messages
    Then "boss" gets no message

  @C-24 @FWD-3
  Scenario: the official MCP Python SDK with an orchestrator's token lists, calls and ends its session
    Given host "b" also runs a worker "w9" whose parent is "boss"
    And "w9" is idle
    When "boss" uses the official MCP Python SDK to list its tools, read the roster and send "brief from an orchestrator" to "w9" without waiting for a reply
    Then the SDK was listed bridge_roster and bridge_send, read the roster, and the send was "injected"
    And herdr on "b" records exactly 1 inject into "w9" with text "brief from an orchestrator"
    And the SDK's DELETE /mcp was answered 200, 204 or 405, and the SDK logged no failed session end

  Scenario: a session ended with DELETE /mcp is answered 200, 204 or 405
    When "lead" opens an MCP session over plain HTTP and ends it with DELETE /mcp
    Then that DELETE was answered 200, 204 or 405
