@broker-restart @site-restart
Feature: A whole site comes back — a host not yet heard from is no evidence against its entities (SPEC [C-25], §6 RPL-1, §3 SIG-2, §12 CON-3)

  A whole site restarts: the broker and every gateway go down together and come back in any order,
  so a receiver may be back long before a sender's host. REPLYs a worker on "b" had confirmed wait
  in the inbox of a main on "a". When "a" is back first, it has not heard from "b" since its own
  reconnect: [C-25] holds those REPLYs (unacked) until "b"'s `_gateway` presence arrives and one
  heartbeat more has passed, at most FLEET_UNKNOWN_HOST_HOLD_S after the reconnect; only then does
  [C-7]'s grace apply, and a REPLY from an entity still not on its host is rejected (SIG-2 (2)).

  Host "b" is kept from coming back with the broker by freezing its gateway (SIGSTOP) while the
  broker is down, or by killing it (SIGKILL) for good. The broker restarts as in
  broker_restart.feature (a broker to the scenario alone). A durable tap of bridge.dlx, which lives
  through the restart, shows what is dead-lettered and when the suite first saw it (a look every
  100 ms). Gateways heartbeat every second, so "a heartbeat" is one second, stretched by the time
  scale; so is the hold handed to the gateways.

  Background:
    Given a broker the suite can restart, to this scenario alone
    And the gateways' unknown-host hold is 20 seconds
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" replies "kept one" and "kept two", each confirmed
    And within 10 seconds the inbox of "lead" holds 0 ready and 2 unacknowledged messages
    And the probe keeps a durable copy of what is dead-lettered

  @C-25 @RPL-1 @SIG-2 @CON-3
  Scenario: the receiver is back first; the sender's host 3 heartbeats later; every confirmed reply is drained once
    When the broker goes down
    And the gateway on "b" is frozen with SIGSTOP
    And the broker comes back
    Then the gateway on "a" is ready within 60 seconds
    And no kept reply is dead-lettered while 3 heartbeats pass
    When the gateway on "b" is thawed with SIGCONT
    Then "lead" drains the replies "kept one" and "kept two" from "w1", each exactly once, within 30 seconds
    And no kept reply was dead-lettered at all

  @C-25 @C-7 @SIG-2 @SIG-5 @CON-3
  Scenario: the sender's host never comes back; its replies are held for the hold, then rejected as [C-7] says
    When the broker goes down
    And the gateway on "b" is killed with SIGKILL
    And the broker comes back
    Then the gateway on "a" is ready within 60 seconds
    And each kept reply is dead-lettered from the inbox of "lead" once, not before the hold has passed since the broker was started again, within 30 seconds after it
    And the gateway on "a" logged each kept reply's rejection naming the check "from_not_on_host"
    And the inbox of "lead" holds no message within 10 seconds
