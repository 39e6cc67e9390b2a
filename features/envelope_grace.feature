@envelope
Feature: The [C-7] grace — a sender whose presence is a moment late is waited for (SPEC §3, SIG-2)

  SIG-2 (2) rejects a message whose `from` does not live on its `host`; [C-7] makes a gateway wait
  up to one heartbeat for a `from` it does not know yet, so a fresh entity's first message is not
  lost to a presence race. The heartbeat is 5 s here (the spec's default): the wait is long enough
  to be seen from outside on a loaded machine.

  Background:
    Given a broker
    And the gateways' heartbeat is 5 seconds
    And host "a" runs a gateway with a main "lead"
    And the probe watches the wire

  @SIG-2
  Scenario: a message that reaches the gateway before its sender's first presence is held until the presence lands
    When the probe sends a valid message to "lead" from "p2", announcing "p2" only once the gateway holds it
    Then "lead" drains the message from "p2", which was never dead-lettered
