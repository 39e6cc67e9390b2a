@foreground @cap-foreground-identity
Feature: Foreground identity — a brief is typed only into the program last seen acting as the worker's agent (SPEC [C-23], CONTRACT §4)

  herdr ties no status to a process: an agent it does not recognise by name leaves its last
  status behind when it exits, and a program other than a shell may then take the terminal
  (measured on herdr v0.8.2: `bash sleeper.sh` running `sleep 1000`). A brief typed then is read
  by nobody and, once that program ends, run by the shell as a command. A gateway remembers the
  foreground group it last saw acting as the agent with herdr's `state_change_seq` then, and
  types nothing while another group holds the terminal and that count has not moved.

  Background:
    Given a broker
    And the gateways' inject bound is 30 seconds
    And host "a" runs a gateway with a main "lead"

  @FWD-2 @FWD-4 @FWD-7
  Scenario: the agent exited and a script that never reads its terminal took it: FAILED stopped at once, nothing typed, nothing run later
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead", its agent reporting its own status
    And the probe watches the wire
    When "lead" sends "first brief" to "w1"
    Then the send returns "injected" within the inject bound
    When "w1" comes back to done and its gateway has looked at its terminal since
    And the agent of "w1" exits, herdr keeping its status
    And a script that never reads its terminal is started in the pane of "w1"
    And "lead" sends "echo this would run in the shell" to "w1"
    Then the send returns "failed" with reason "stopped" at once
    And herdr on "b" records nothing typed into "w1" after its first brief
    When the script in the pane of "w1" ends
    Then herdr on "b" records nothing run as a command in "w1"

  # [C-23] "from the worker's registration on": a worker that never took a brief is covered too
  # (real herdr v0.8.2, 2026-12-06 case c5: there the brief was typed, and the shell ran it later).
  @FWD-2 @FWD-4 @FWD-7 @c23-registration
  Scenario: a worker that never took a brief: its agent exited and a script that never reads took the terminal: FAILED stopped at once, nothing typed, nothing run later
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead", its agent reporting its own status
    And the probe watches the wire
    When the agent of "w1" exits, herdr keeping its status
    And a script that never reads its terminal is started in the pane of "w1"
    And "lead" sends "echo this would run in the shell" to "w1"
    Then the send returns "failed" with reason "stopped" at once
    And herdr on "b" records nothing typed into "w1"
    When the script in the pane of "w1" ends
    Then herdr on "b" records nothing run as a command in "w1"

  @FWD-2 @FWD-7
  Scenario: the agent exited and was started again in its pane: herdr shows the new one reporting, the next brief is injected
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When "lead" sends "first brief" to "w1"
    Then the send returns "injected" within the inject bound
    When "w1" comes back to done and its gateway has looked at its terminal since
    And the agent of "w1" exits and is started again in its pane, reporting idle
    And "lead" sends "second brief" to "w1"
    Then the send returns "injected" within the inject bound
    And herdr on "b" records exactly 1 inject into "w1" with text "second brief"

  @FWD-2 @FWD-7
  Scenario: the agent runs under a script (bash run-agent.sh): its group stays the agent's, every brief is injected
    Given host "b" runs a gateway with a worker "w1" whose parent is "lead", its agent run by a script
    When "lead" sends "first brief" to "w1"
    Then the send returns "injected" within the inject bound
    When "w1" comes back to done and its gateway has looked at its terminal since
    And "lead" sends "second brief" to "w1"
    Then the send returns "injected" within the inject bound
    And herdr on "b" records exactly 1 inject into "w1" with text "second brief"
