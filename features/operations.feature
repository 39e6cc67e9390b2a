@operations
Feature: Gateway operations — metrics and graceful stop (issue 10)

  What an operator relies on: `/metrics` counts what the gateway did (the reference's own
  surface, `@reference`), and SIGTERM stops a gateway cleanly and promptly (CONTRACT §1, "A
  graceful stop"): a brief still waiting for its worker is reported FAILED `stopped` to its sender
  instead of being left to the sender's inject bound, the host's entities are announced `down`
  instead of lingering in everyone's roster until their TTL, and their inboxes stay for a restart.

  Background:
    Given a broker
    And the gateways' inject bound is 20 seconds

  # The reference gateway's own metrics: neither SPEC nor CONTRACT asks another gateway for them.
  @reference
  Scenario: /metrics shows a brief's flow on both gateways
    Given host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the metrics of "a" are noted
    And the metrics of "b" are noted
    When "lead" sends "profile the hot path" to "w1"
    Then the send returns "injected" within 10 seconds
    And the metric fleet_published_total{kind="SEND"} of "a" rose by exactly 1
    And the metric fleet_consumed_total{kind="SEND"} of "b" rose by exactly 1
    And the metric fleet_injects_total{outcome="injected"} of "b" rose by exactly 1
    And the metric fleet_stage_seconds_count{stage="inject"} of "b" rose by exactly 1
    And the metric fleet_stage_seconds_count{stage="report"} of "b" rose by exactly 1
    And the metric fleet_stage_seconds_count{stage="await_injected"} of "a" rose by exactly 1
    And the metric fleet_published_total{kind="INJECTED"} of "b" rose by exactly 1
    And the metric fleet_published_total{kind="PRESENCE"} of "b" rose by at least 1
    And the metric fleet_roster_entries of "a" is at least 4

  @FWD-4
  Scenario: SIGTERM during a pending inject ends in FAILED stopped and down, not a hang
    # Long heartbeats (TTL 30 s): only a `down` can empty the roster within seconds. Host "b"
    # starts first so that it hears "lead"'s first presence, not only its next heartbeat.
    Given the gateways' heartbeat is 10 seconds
    And host "b" runs a gateway
    And host "a" runs a gateway with a main "lead"
    And host "b" also runs a worker "w1" whose parent is "lead"
    And "w1" is working
    When "lead" sends "migrate the schema" to "w1"
    Then within 5 seconds the broker shows the brief to "w1" acked, with nothing ready or unacknowledged
    And the send is still waiting for its outcome
    When the gateway on "b" is stopped with SIGTERM
    Then the gateway on "b" exited by itself with status 0 within 10 seconds
    And the gateway on "b" logged no line at ERROR from its SIGTERM to its exit
    And the send returns "failed" with reason "stopped" within 5 seconds
    And herdr on "b" records no inject into "w1"
    And within 3 seconds the roster of "a" no longer lists "w1"
    And within 3 seconds the roster of "a" no longer lists the gateway of "b"
    And the inbox of "w1" is still on the broker
