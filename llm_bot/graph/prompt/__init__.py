"""What the model is sent for one event, composed as BitBrat's llm-bot composes it.

The messages, in order, with the module that renders each part (every ``## [Name]`` section
is rendered by :mod:`.sections`, in BitBrat's format; the list below names where its content
comes from):

1. **The system message** (:func:`.composition.system_message`):

   - ``## [System Prompt]``: ours, ``LLM_BOT_SYSTEM_PROMPT``, else ``architecture.yaml``
     (:mod:`.system_prompt`);
   - ``## [Assistant Identity]``: the event's personalities, written out or named and looked
     up (:func:`.composition.resolve_identity`, :mod:`llm_bot.db.personalities`).

2. **The memory context's messages**: notes, memories, recalled older messages and the
   thread's window (:mod:`llm_bot.memory.context`), in place of BitBrat's
   ``## [Conversation State / History]`` section.

3. **The user message** (:meth:`.composition.Request.user_message`):

   - ``## [Requesting User]``: handle, user id, display name, roles, notes
     (:func:`.annotations.requesting_user`);
   - ``## [Contexts]``: the story's parts (:func:`.story.story_contexts`) and the context
     packs (:func:`.annotations.context_packs`), by priority;
   - ``## [Constraints]``: the behaviour profile's guidance
     (:func:`llm_bot.graph.behavior.texts.guidance_lines`, priority 2), then the
     personalities' constraint lines (:mod:`.composition`, priority 3);
   - ``## [Task]``: the profile's task line (:func:`llm_bot.graph.behavior.texts.task_instruction`,
     priority 2), then the task annotations (:func:`.annotations.task_texts`, priority 3), the
     Narrator instruction last when the slip has a step ``adventure`` (:mod:`.story`);
   - ``## [Input]``: the user's words (``message.text``), else the task's text.

4. **This run's tool calls and their results**, when the model uses tools
   (:mod:`llm_bot.graph.tool_round`).

The node :mod:`llm_bot.graph.nodes.ingest_prompt` makes the user message once per run;
:mod:`llm_bot.graph.nodes.call_model` sends the system message, the memory context and the run's
messages at each model call. docs/memory.md, "What the model sees, in order", says the same
from memory's side.

The modules are the public API; none is imported here."""
