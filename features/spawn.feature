@spawn
Feature: Spawn and stop across hosts (SPEC §9)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with profiles "claude=claude --yes"
    And the probe watches the wire

  @SPN-1 @SPN-4 @smoke
  Scenario: a main spawns a worker on another host, which gets its brief once
    When "lead" spawns a "claude" worker "w9" on "b" with brief "triage issue 7"
    Then the spawn of "w9" returns "present" within 10 seconds
    And herdr on "b" shows one new pane for "w9" with the FLEET_* env and the command "claude --yes"
    And the roster of "a" lists "w9" on "b"
    And the spawned worker "w9" answers MCP as itself
    When the spawned agent "w9" becomes idle
    Then herdr on "b" records exactly 1 inject into "w9" with text "triage issue 7"
    And "lead" drains an INJECTED notice for the spawn of "w9" within 10 seconds
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @SPN-2 @crash
  Scenario: a SPAWN delivered twice, before and after a restart, still launches one agent
    When "lead" spawns a "claude" worker "w9" on "b" with brief "triage issue 7"
    And the spawn of "w9" returns "present" within 10 seconds
    And herdr on "b" shows one new pane for "w9" with the FLEET_* env and the command "claude --yes"
    When the SPAWN of "w9" is delivered again with a fresh msgId
    Then herdr on "b" still shows exactly one pane for "w9"
    When the gateway on "b" is restarted
    And the SPAWN of "w9" is delivered again with a fresh msgId
    Then herdr on "b" still shows exactly one pane for "w9"
    And the roster of "a" lists "w9" on "b"

  @SPN-3
  Scenario: an unknown profile is refused with FAILED unknown_profile
    When "lead" spawns a "gemini" worker "w8" on "b" with brief "hello"
    Then the spawn of "w8" returns "failed" with reason "unknown_profile" within 10 seconds
    And herdr on "b" created no pane
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @SPN-3
  Scenario: a launcher error is reported as FAILED spawn_failed
    Given herdr on "b" cannot open panes
    When "lead" spawns a "claude" worker "w8" on "b" with brief "hello"
    Then the spawn of "w8" returns "failed" with reason "spawn_failed" within 10 seconds
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @SPN-4 @RPL-1
  Scenario: a spawned worker's reply reaches the main that spawned it
    When "lead" spawns a "claude" worker "w9" on "b" with brief "triage issue 7"
    Then the spawn of "w9" returns "present" within 10 seconds
    And herdr on "b" shows one new pane for "w9" with the FLEET_* env and the command "claude --yes"
    When "w9" replies "issue 7 is a duplicate of 3"
    And "lead" polls messages from "w9"
    Then "lead" gets exactly 1 message
    And message 1 is a REPLY from "w9" with text "issue 7 is a duplicate of 3"

  @SPN-1 @PUB-2
  Scenario: a spawn on an unknown host fails fast with no_route
    When "lead" spawns a "claude" worker "w7" on "nowhere" with brief "hello"
    Then the spawn of "w7" returns "failed" with reason "no_route" within 3 seconds

  @SPN-5 @TOP-6 @PRS-2 @cap-stop
  Scenario: a main stops a remote worker: pane closed, inbox gone, down seen everywhere
    When "lead" spawns a "claude" worker "w9" on "b" with brief "triage issue 7"
    And the spawn of "w9" returns "present" within 10 seconds
    And herdr on "b" shows one new pane for "w9" with the FLEET_* env and the command "claude --yes"
    When "lead" stops "w9"
    Then herdr on "b" shows the pane of "w9" closed
    And the inbox of "w9" is gone
    And within 1 heartbeat the roster of "a" no longer lists "w9"
    And over 1 heartbeat the probe sees no heartbeat of "w9" after its down
    And every message the probe saw a gateway publish is complete, in long strings, and signed

  @SPN-1 @SPN-4 @unknown-fields
  Scenario: a SPAWN whose body has fields no gateway knows is honoured as if they were absent ([C-17])
    When "lead" sends "b" a signed SPAWN of a "claude" worker "w9" with brief "triage issue 7" and body fields no gateway knows
    Then herdr on "b" opens one pane for the SPAWN of "w9" with the FLEET_* env and the command "claude --yes"
    And the roster of "a" lists "w9" on "b"
    When the spawned agent "w9" becomes idle
    Then herdr on "b" records exactly 1 inject into "w9" with text "triage issue 7"
    And "lead" drains an INJECTED notice for the spawn of "w9" within 10 seconds

  @SPN-5 @cap-stop @unknown-fields
  Scenario: a STOP whose body has fields no gateway knows is honoured as if they were absent ([C-17])
    When "lead" spawns a "claude" worker "w9" on "b" with brief "triage issue 7"
    And the spawn of "w9" returns "present" within 10 seconds
    And herdr on "b" shows one new pane for "w9" with the FLEET_* env and the command "claude --yes"
    When "lead" sends "b" a signed STOP of "w9" with body fields no gateway knows
    Then herdr on "b" shows the pane of "w9" closed
    And the inbox of "w9" is gone
    And within 1 heartbeat the roster of "a" no longer lists "w9"
