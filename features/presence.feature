@presence
Feature: Presence — every gateway keeps the union roster from signed heartbeats (SPEC §8)

  Gateways in these scenarios heartbeat every second (the suite's setting; the spec default is 5 s),
  so "a heartbeat" below is one second, stretched by the time-scale knob.

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"

  @PRS-1 @PRS-2 @smoke
  Scenario: three hosts converge on the same roster within two heartbeats
    Given host "c" runs a gateway with a worker "w2" whose parent is "lead"
    Then within 2 heartbeats the rosters of "a", "b" and "c" all list "lead" on "a", "w1" on "b" and "w2" on "c"

  @PRS-2 @TOP-6
  Scenario: a stopped entity leaves every roster at once, and its inbox goes with it
    Given the roster of "a" lists "w1" on "b"
    When "w1" is stopped through the local API of "b"
    Then within 1 heartbeat the roster of "a" no longer lists "w1"
    And the inbox of "w1" is gone
    And herdr on "b" shows the pane of "w1" closed

  @PRS-2 @crash
  Scenario: a killed gateway's entities vanish once their ttl passes
    Given the roster of "a" lists "w1" on "b"
    When the gateway on "b" is killed with SIGKILL
    Then within 4 heartbeats the roster of "a" no longer lists "w1"

  @PRS-4 @PRS-1
  Scenario: an agentless host is listed with its spawnable profiles
    Given host "d" runs a gateway with profiles "claude=claude --yes;codex=codex"
    Then within 2 heartbeats the roster of "a" lists the gateway of "d" with profiles "claude, codex"

  @CON-2
  Scenario: a second gateway registering a live entity's gid is refused loudly, the first keeps it
    Given host "c" runs a gateway
    When host "c" tries to register a worker with the gid of "w1"
    Then the registration is refused and logged at ERROR
    And the inbox of "w1" has one consumer, and a second exclusive consumer is refused
    And the roster of "a" lists "w1" on "b"

  @PRS-3 @SIG-2
  Scenario: a second host claiming a live gid in its heartbeat is refused, the first claim stays
    When host "c" claims the gid of "w1" in a signed heartbeat
    Then the roster of "a" has judged that claim
    And the roster of "a" still lists "w1" on "b" only
    And the roster of "b" has judged that claim
    And the roster of "b" still lists "w1" on "b" only

  @PRS-2 @crash
  Scenario: a restarted gateway rebuilds its view from heartbeats
    When the gateway on "a" is restarted
    Then the roster of "a" lists "w1" on "b"
    And the roster of "a" lists "lead" on "a"

  @PRS-2 @SIG-2
  Scenario: JSON body fields a gateway does not know are ignored, in PRESENCE and in a notice ([C-17])
    Given the probe watches the wire
    When the probe announces "p9" on host "probe" with a body field no gateway knows
    Then within 2 heartbeats every roster lists "p9" on host "probe"
    When "p9" on the probe host sends "lead" a FAILED whose body has a field no gateway knows
    Then "lead" drains that FAILED, which was never dead-lettered
