import pytest

from localinfer.chat.template import GEMMA_TEMPLATE, ChatTemplate, ChatTemplateError, template_for

GEMMA3_REF = "gemma-3-270m-q4_k_m"


def test_smollm2_template_matches_llama_cpp(load_ref):
    ref = load_ref("chat")
    t = ChatTemplate(ref["template"], ref["bos_token"], ref["eos_token"])
    assert t.render(ref["messages"], add_generation_prompt=True) == ref["formatted_prompt"]
    assert t.render(ref["messages"], add_generation_prompt=False) == ref["formatted_prompt_no_generation_prompt"]


def test_model_renders_and_tokenizes_chat_like_llama_cpp(smollm2_model, load_ref):
    ref = load_ref("chat")
    assert smollm2_model.apply_chat_template(ref["messages"]) == ref["formatted_prompt"]
    assert smollm2_model.chat_tokens(ref["messages"]) == ref["token_ids"]


def test_builtin_gemma_format_matches_llama_cpp(load_ref):
    ref = load_ref("chat", GEMMA3_REF)
    assert ref["template"] is None
    assert template_for({"general.architecture": "gemma3"}) == GEMMA_TEMPLATE
    assert ChatTemplate(GEMMA_TEMPLATE, "<bos>", "<eos>").render(ref["messages"]) == ref["formatted_prompt"]


def test_sandbox_blocks_python_internals():
    t = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        t.render([{"role": "user", "content": "x"}])
    t = ChatTemplate("{% set _ = messages.append(1) %}")
    with pytest.raises(ChatTemplateError):
        t.render([{"role": "user", "content": "x"}])


def test_raise_exception_and_bad_templates():
    t = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        t.render([])
    broken = ChatTemplate("{% for %}")  # compiled on first use: a model with a broken template still loads
    for _ in range(2):
        with pytest.raises(ChatTemplateError, match="invalid chat template"):
            broken.render([])


def test_malformed_messages():
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    for bad in ("hello", [{"content": "no role"}], [{"role": "user", "content": 3}], [42]):
        with pytest.raises(ChatTemplateError):
            t.render(bad)
    assert t.render([{"role": "user", "content": None}]) == ""
