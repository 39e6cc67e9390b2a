@agent-gone
Feature: An agent gone, its pane kept — nothing is typed into a shell at its prompt (SPEC §5 [C-20], RPL-3)

  herdr keeps showing an agent's last status when an agent it does not recognise exits, and shows
  an agent it recognises `unknown` once it exits; either way the terminal is back with a shell,
  which would run anything typed as a command. Right before typing a brief or a nudge a gateway
  asks herdr who holds the terminal, and types nothing while a shell at its prompt holds it.

  Background:
    Given a broker
    And the gateways' inject bound is 30 seconds
    And gateways nudge after 300 ms
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the roster of "b" lists "lead" on "a"
    And the probe watches the wire

  @FWD-2 @FWD-4 @C-20
  Scenario: an interactive shell holds the worker's terminal while herdr still shows it idle: FAILED stopped at once, nothing typed
    Given "w1" is idle
    And an interactive shell started in the pane of "w1" holds its terminal
    When "lead" sends "echo this would run in the shell" to "w1"
    Then the send returns "failed" with reason "stopped" at once
    And herdr on "b" records nothing typed into "w1"

  @FWD-4 @C-20
  Scenario: the worker's agent, one herdr recognises, has exited: herdr shows no agent, FAILED stopped well before the bound
    Given "w1" is idle
    And the agent of "w1" has exited, herdr showing the pane's status as unknown
    When "lead" sends "echo this would run in the shell" to "w1"
    Then the send returns "failed" with reason "stopped" at once
    And herdr on "b" records nothing typed into "w1"

  @FWD-2 @C-20
  Scenario: a script run by a shell holds the worker's terminal: a program, not a shell at its prompt — the brief is typed once
    Given "w1" is idle
    And a script run by bash holds the terminal of "w1", reporting as its agent
    When "lead" sends "summarise the open issues" to "w1"
    Then the send returns "injected", or "failed" with reason "not_submitted", within the inject bound
    And herdr on "b" records exactly 1 inject into "w1" with text "summarise the open issues"

  @RPL-3 @RPL-1 @C-20
  Scenario: the main's agent has exited, herdr still showing its status: no nudge is typed, its messages wait for a drain
    Given the agent of "lead" has exited, herdr still showing its last status
    When "w1" replies "tests are green"
    And "w1" replies "docs updated"
    Then herdr on "a" records no nudge into "lead" while 6 nudge intervals pass
    When "lead" polls all messages
    Then "lead" gets exactly 2 messages

  @RPL-3 @RPL-1 @C-20
  Scenario: an interactive shell holds the main's terminal: no nudge is typed, its messages wait for a drain
    Given an interactive shell started in the pane of "lead" holds its terminal
    When "w1" replies "tests are green"
    Then herdr on "a" records no nudge into "lead" while 6 nudge intervals pass
    When "lead" polls all messages
    Then "lead" gets exactly 1 message
