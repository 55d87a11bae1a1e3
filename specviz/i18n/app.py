"""Strings of the app shell: navigation, sidebar, method names, shared labels, Home and Decode."""

STRINGS: dict[str, tuple[str, str]] = {
    # ---- app / navigation
    "app.title": ("SpecViz", "SpecViz"),
    "nav.home": ("Home", "首页"),
    "nav.decode": ("Decode round", "解码轮次"),
    "nav.compare": ("Compare EAGLE-1/2/3", "比较 EAGLE-1/2/3"),
    "nav.lossless": ("Losslessness", "无损性"),
    "nav.free": ("When extra tokens are free", "额外 token 何时免费"),
    "nav.rule": ("The acceptance rule", "接受规则"),
    # ---- sidebar
    "sb.language": ("Language / 语言", "Language / 语言"),
    "sb.model": ("Model", "模型"),
    "sb.model_default": ("SmolLM2-135M-Instruct (default)", "SmolLM2-135M-Instruct（默认）"),
    "sb.dtype": ("Precision", "精度"),
    "sb.dtype_help": (
        "fp32 matches Hugging Face (to about 1e-5); for the default model on a CPU it multiplies straight from the GGUF's 4-bit blocks, the fastest choice there. bf16 rounds the weights to dense bf16: slower on a CPU, faster on a GPU, and a speculative run may then differ from vanilla at near-ties.",
        "fp32 与 Hugging Face 一致（误差约 1e-5）；在 CPU 上运行默认模型时直接用 GGUF 的 4 位块做乘法，是 CPU 上最快的选择。bf16 会把权重舍入为稠密 bf16：在 CPU 上更慢、在 GPU 上更快，并且在概率几乎相同的位置，推测解码的结果可能与普通解码不同。",
    ),
    "sb.method": ("Method", "方法"),
    "sb.sampling": ("Sampling", "采样"),
    "sb.temperature": ("Temperature (0 = greedy)", "温度（0 = 贪心）"),
    "sb.top_k": ("Top-k (0 = off)", "Top-k（0 = 关闭）"),
    "sb.top_p": ("Top-p (1 = off)", "Top-p（1 = 关闭）"),
    "sb.tree": ("Draft settings", "草稿设置"),
    "sb.depth": ("Tree depth", "树深度"),
    "sb.tree_topk": ("Children per node (top_k)", "每个节点的子节点数（top_k）"),
    "sb.total_tokens": ("Tree size (total_tokens)", "树大小（total_tokens）"),
    "sb.min_prob": ("Keep paths at least this likely (0 = fixed size)", "只保留概率不低于此值的路径（0 = 固定大小）"),
    "sb.min_prob_help": ("A draft path's probability is the product of the drafter's q along it; a well-calibrated head "
                         "sees its path accepted about that often. Above 0 the tree keeps (and drafts) only paths at least "
                         "this likely, up to the size above, so it grows when the head is sure and shrinks to the root alone "
                         "when it is not. 0: EAGLE-2's fixed-size tree.",
                         "草稿路径的概率是起草器沿路径各 q 的乘积；校准良好的草稿头，其路径被接受的频率大约就是这个值。"
                         "大于 0 时，树只保留（也只起草）概率不低于此值的路径（不超过上面的大小）：草稿头有把握时树变大，"
                         "没有把握时只剩根节点。0：EAGLE-2 的固定大小树。"),
    "sb.draw": ("Draw the drafts from q (T > 0)", "从 q 中抽取草稿（T > 0）"),
    "sb.draw_help": ("Off (EAGLE's own rule): the drafter proposes its likeliest tokens and the target keeps a draft x with probability "
                     "p(x) - at temperature 1 often small, even when the drafter knows p well. On: each node's "
                     "children are drawn from the drafter's q (without replacement) and a draft is kept with probability "
                     "min(1, p(x)/q(x)), on average the overlap of p and q: kept more often. Both keep the output exactly "
                     "the target's. Greedy decoding (T = 0) is the same either way.",
                     "关闭（EAGLE 自己的规则）：起草器提出它认为最可能的 token，目标模型以概率 p(x) 保留草稿 x——温度为 1 时这个概率往往很小，"
                     "即使起草器很了解 p。开启：每个节点的子节点按起草器的 q 抽取（不放回），草稿以概率 "
                     "min(1, p(x)/q(x)) 被保留，平均等于 p 与 q 的重叠：保留得更多。两者的输出都与目标模型完全一致。"
                     "贪心解码（T = 0）两者相同。"),
    "sb.tune": ("Tune the tree for this machine", "为本机调优草稿树"),
    "sb.tune_help": ("Picks depth and size that maximise tokens/s: the head's measured acceptance for every tree "
                     "size, divided by this machine's measured time per round, ranks the trees; the best few and "
                     "vanilla are then timed on built-in prompts and the fastest wins (within 3% of it, the tree "
                     "that verifies fewer tokens).",
                     "选择使每秒词元数最大的深度和大小：用草稿头在每种树大小下实测的接受长度除以本机实测的每轮耗时为各棵树排序；"
                     "再在内置提示上实测排名靠前的几棵树与普通解码，取最快的一棵（与最快相差 3% 以内时，取验证词元更少的一棵）。"),
    "sb.tune_measuring": ("Measuring this machine's forward and drafting costs and timing the best trees (once)...",
                          "正在测量本机的前向与起草耗时并实测最佳的几棵树（仅一次）……"),
    "sb.tune_none": ("This head ships no acceptance profile: run `python -m specviz.tuning profile`.",
                     "该草稿头没有接受率档案：请运行 `python -m specviz.tuning profile`。"),
    "sb.tune_done": ("Tuned: depth {depth}, {n} nodes: tau {tau:.2f}, {tps:.1f} tok/s measured here on built-in prompts (vanilla {van:.1f}; {sp:.2f}x, paired by prompt).",
                     "已调优：深度 {depth}，{n} 个节点：在本机内置提示上实测 tau {tau:.2f}、{tps:.1f} 词元/秒（普通解码 {van:.1f}；逐提示配对为 {sp:.2f} 倍）。"),
    "sb.tune_at_t1": ("Timed at temperature 1, where rounds accept less: the tree for any temperature above 0.",
                      "在温度 1 下计时（采样时每轮接受得更少）：温度大于 0 时都用这棵树。"),
    "sb.tune_drawn": ("Its drafts are drawn from q, as they were when it was timed.", "其草稿从 q 中抽取，与计时时一致。"),
    "sb.tune_done_floor": ("Tuned: depth {depth}, paths at least {p:.2f} likely (a tree as large as the head is sure): tau "
                           "{tau:.2f}, {tps:.1f} tok/s measured here on built-in prompts (vanilla {van:.1f}; {sp:.2f}x, paired by prompt).",
                           "已调优：深度 {depth}，只保留概率不低于 {p:.2f} 的路径（草稿头有多大把握，树就多大）：在本机内置提示上实测 "
                           "tau {tau:.2f}、{tps:.1f} 词元/秒（普通解码 {van:.1f}；逐提示配对为 {sp:.2f} 倍）。"),
    "sb.pld_ngram": ("PLD: longest n-gram to match", "PLD：最长匹配 n-gram"),
    "sb.pld_tokens": ("PLD: tokens to copy", "PLD：复制的 token 数"),
    "sb.seed": ("Seed", "随机种子"),
    "sb.max_new": ("New tokens", "新生成 token 数"),
    "sb.unavailable": ("not available: {note}", "不可用：{note}"),
    "sb.model_error": ("The model could not be loaded: {err}", "模型无法加载：{err}"),
    # ---- methods and availability notes
    "m.vanilla": ("Vanilla (no draft)", "普通解码（无草稿）"),
    "m.pld": ("PLD (prompt lookup)", "PLD（提示查找）"),
    "m.sps": ("SpS (small draft model)", "SpS（小草稿模型）"),
    "m.medusa": ("Medusa", "Medusa"),
    "m.eagle1": ("EAGLE-1", "EAGLE-1"),
    "m.eagle2": ("EAGLE-2", "EAGLE-2"),
    "m.eagle3": ("EAGLE-3", "EAGLE-3"),
    "note.head_missing": ("head not trained yet", "草稿头尚未训练"),
    "note.verify_missing": ("verification module not in this build yet", "此版本尚无验证模块"),
    "note.drafter_missing": ("drafter not in this build yet", "此版本尚无该草稿器"),
    "note.unavailable_method": (
        "{method} is not available yet ({note}). Pick another method in the sidebar.",
        "{method} 目前不可用（{note}）。请在侧边栏选择其他方法。",
    ),
    # ---- common
    "c.prompt": ("Prompt", "提示词"),
    "c.examples": ("Example prompts", "示例提示词"),
    "c.generate": ("Generate", "生成"),
    "c.tau": ("tau (tokens per target pass)", "tau（每次目标前向的 token 数）"),
    "c.tokens_per_s": ("tokens/s", "词元/秒"),
    "c.speedup": ("speedup vs vanilla", "相对普通解码的加速"),
    "c.vanilla_tps": ("vanilla tokens/s", "普通解码词元/秒"),
    "c.rounds": ("rounds", "轮数"),
    "c.error": ("Error: {err}", "错误：{err}"),
    "c.download_json": ("Download round as JSON", "下载本轮 JSON"),
    "c.download_html": ("Download figure as HTML", "下载图表 HTML"),
    "c.measured_note": (
        "Measured just now on this machine ({device}); timings vary with load.",
        "刚刚在本机（{device}）上测得；计时随负载而变化。",
    ),
    "c.empty_prompt": ("The prompt is empty: type something for the model to answer.", "提示词为空：请输入要让模型回答的内容。"),
    "c.device_cpu": ("cpu ({n} threads)", "CPU（{n} 个线程）"),
    "c.loading_model": ("Loading the model…", "正在加载模型……"),
    "c.prompt_too_long": ("The prompt has {n:,} characters; SpecViz takes at most {max:,}. Shorten it.", "提示词有 {n:,} 个字符，最多 {max:,} 个，请缩短。"),
    "sb.runs_on": ("Runs on {device}", "运行设备：{device}"),
    "sb.other_model": ("Other model", "其他模型"),
    "sb.model_path": ("Folder in the cache or an allowed directory, or a cached Hub id", "缓存或允许目录中的文件夹，或已缓存的 Hub 模型名"),
    "sb.load": ("Load", "加载"),
    "sb.loaded": ("Loaded: {spec}", "已加载：{spec}"),
    "c.stop_hint": ("Long runs show progress; press Stop (top right) to cancel.", "长时间运行会显示进度；点击右上角“Stop”可取消。"),
    # ---- home
    "home.title": ("Speculative decoding, step by step", "推测解码，一步一步看"),
    "home.idea": (
        "A large model writes one token per forward pass, and each pass mostly waits for its weights to arrive from memory. "
        "Speculative decoding lets a cheap **drafter** guess several next tokens (a chain or a tree), then the **target** model "
        "checks all of them **in one pass**. Every guess it agrees with is kept for free; at the first disagreement the target "
        "**corrects** it with a token drawn from exactly the right distribution, so the output is the same as if the target had "
        "written alone, only faster. Everything on these pages is computed live by a real engine on the real model.",
        "大模型每次前向只写出一个 token，而每次前向大部分时间都在等待权重从内存读入。推测解码（也常译作“投机解码”）让一个廉价的**草稿器**先猜出后续几个 token（一条链或一棵树），"
        "再由**目标模型**通过**一次前向**同时检查所有猜测。凡是目标模型认可的猜测都被免费保留；在第一个分歧处，目标模型用一个从完全正确的分布中抽取的 token 进行**纠正**，"
        "因此输出与目标模型单独生成时完全相同，只是更快。本应用中的一切都由真实引擎在真实模型上实时计算。",
    ),
    "home.result": ("Result", "结果"),
    "home.demo_title": ("One real round", "一个真实的轮次"),
    "home.demo_lead": (
        "The EAGLE-3 head guessed a **tree** of {n} tokens ({d} levels deep); the target checked all of them in **one** pass. "
        "The green path ({acc} tokens) matched what the target would have written itself, so this round added **{k} tokens** "
        "for one target pass (the last one comes from the target: the correction or bonus token). Red nodes were tried and rejected; grey ones were never needed.",
        "EAGLE-3 草稿头猜出了一棵 {n} 个 token 的**树**（{d} 层深）；目标模型用**一次**前向检查了全部猜测。"
        "绿色路径（{acc} 个 token）与目标模型自己会写出的内容一致，因此这一轮只用一次目标前向就得到了 **{k} 个 token**"
        "（最后一个来自目标模型本身：纠正 token 或附加 token）。红色节点被尝试后拒绝；灰色节点无需检查。",
    ),
    "home.demo_caption": (
        "Recorded by the engine (greedy, fp32) from the shipped EAGLE-3 head on the prompt “{prompt}”; a test replays it live and gets the identical round.",
        "由引擎录制（贪心解码，fp32），使用随附的 EAGLE-3 草稿头，提示词为“{prompt}”；一个测试会实时重放它并得到完全相同的一轮。",
    ),
    "home.demo_link": (
        "Walk through it step by step on the [Lesson](/lesson) page, or step through your own rounds on [Decode round](/decode).",
        "在[课程](/lesson)页面逐步讲解这一轮，或在[解码轮次](/decode)页面逐轮运行你自己的提示词。",
    ),
    "home.try_title": ("Try it on your own prompt", "用你自己的提示词试试"),
    "home.accepted_lead": (
        "**τ = {tau:.2f}** tokens per target pass: {acc} of {n} tokens were drafted and accepted (green); the other {rest} came from the target's own pass (the token it adds each round).",
        "**τ = {tau:.2f}**：每次目标模型前向产生的 token 数。{n} 个 token 中有 {acc} 个是草稿提出并被接受的（绿色）；其余 {rest} 个来自目标模型自己的那一次前向（每轮额外给出的 token）。",
    ),
    "home.speed": ("Speed on this machine", "本机上的速度"),
    "home.speed_note": (
        "Median of {n} runs on this machine, taken in turns with vanilla (tokens/s of each: {runs}; vanilla: {van}); other users may share the machine. The acceptance above is what speculation achieves; the speed depends on the hardware (see \"{page}\") and on how predictable the text is - code and lists are guessed far more often than free prose (try the example prompts).",
        "本机上与普通解码轮流运行 {n} 次取中位数（各次词元/秒：{runs}；普通解码：{van}）；本机可能同时被其他用户使用。上面的接受情况是推测解码本身的效果；速度取决于硬件（见“{page}”），也取决于文本有多好猜——代码和列表比自由行文容易猜中得多（可试试示例提示词）。",
    ),
    "home.legend": ("Colours: how each token was produced", "颜色：每个 token 的产生方式"),
    "home.vanilla_same": ("Output identical to vanilla: {same}", "与普通解码输出相同：{same}"),
    "home.differs_note": (
        "With sampling, speculative and vanilla runs use the random generator differently, so texts differ; the distribution is the same (see Losslessness).",
        "在采样模式下，推测解码与普通解码使用随机数的方式不同，因此文本会不同；但分布相同（见“无损性”页）。",
    ),
    "home.running_both": ("Running {method} and vanilla in turns, {n} times each, for a fair speedup…", "正在轮流运行 {method} 与普通解码（各 {n} 次），以公平计算加速比……"),
    "home.yes": ("yes", "是"),
    "home.no": ("no", "否"),
    "home.greedy_diff": (
        "Greedy outputs differ from vanilla. In fp32 this should not happen; in bf16 it can at near-ties.",
        "贪心输出与普通解码不同。fp32 下不应发生；bf16 下在概率接近的位置可能发生。",
    ),
    # ---- decode page
    "dec.title": ("One decode round at a time", "逐轮解码"),
    "dec.intro": (
        "Start a sequence, then step round by round. Each round has three stages: the drafter proposes a tree, the target scores the whole tree in one pass (the attention mask keeps branches apart), and the acceptance rule walks the tree.",
        "开始一个序列，然后逐轮前进。每一轮分三个阶段：草稿器提出一棵树；目标模型一次前向为整棵树打分（注意力掩码让各分支互不干扰）；接受规则沿树逐个检验。",
    ),
    "dec.start": ("Start / reset", "开始 / 重置"),
    "dec.next": ("Next round", "下一轮"),
    "dec.replay": ("Replay this round", "重放本轮"),
    "dec.press_next": ("Prefilled. Press Next round to draft, verify and accept.", "已预填充。点击“下一轮”进行起草、验证和接受。"),
    "dec.finished": ("Generation finished (end of text or token budget).", "生成已结束（遇到结束符或达到 token 上限）。"),
    "dec.not_started": ("Press Start to tokenise the prompt and prefill the target.", "点击“开始”对提示词分词并预填充目标模型。"),
    "dec.round": ("Round {i} of {n}", "第 {i} 轮 / 共 {n} 轮"),
    "dec.pick_round": ("Show round", "显示轮次"),
    "dec.stage": ("Stage", "阶段"),
    "dec.stage_draft": ("1 · Draft", "1 · 起草"),
    "dec.stage_verify": ("2 · Verify", "2 · 验证"),
    "dec.stage_accept": ("3 · Accept or correct", "3 · 接受或纠正"),
    "dec.grow": ("Tree level shown", "显示到第几层"),
    "dec.draft_text": (
        "The drafter proposed {n} tokens in {ms:.2f} ms (depth {d}). Node colour = drafted; hover a node for its draft probability q and score.",
        "草稿器用 {ms:.2f} 毫秒提出了 {n} 个 token（深度 {d}）。悬停节点可查看草稿概率 q 与得分。",
    ),
    "dec.no_draft": ("This method drafts nothing this round: the tree is the root alone, and the target simply samples one token.", "该方法本轮没有草稿：树只有根节点，目标模型只采样一个 token。"),
    "dec.verify_text": (
        "The target ran once over {n} tokens (prefix {L} committed tokens) in {ms:.1f} ms. Each row of the mask shows what that token may attend to: the committed context plus its own ancestors. Position ids = prefix + depth.",
        "目标模型对 {n} 个 token 只做了一次前向（已提交前缀 {L} 个 token），耗时 {ms:.1f} 毫秒。掩码的每一行表示该 token 能看到的内容：已提交的上下文以及它自己的祖先。位置编号 = 前缀长度 + 深度。",
    ),
    "dec.accept_text": (
        "Rule: {rule}. Accepted {a} draft token(s), then the target added “{tok}” ({src}). This round committed {c} token(s).",
        "规则：{rule}。接受了 {a} 个草稿 token，随后目标模型加入“{tok}”（{src}）。本轮共提交 {c} 个 token。",
    ),
    "dec.click": ("Click a node (or box-select) to see its p-vs-q bars and highlight its ancestors in the mask.", "点击节点（或框选）可查看其 p 与 q 的对比，并在掩码中高亮其祖先。"),
    "dec.selected": ("Selected node {id}", "已选节点 {id}"),
    "dec.text_so_far": ("Text so far (coloured by round)", "目前的文本（按轮次着色）"),
    "dec.timing": ("draft {d:.1f} ms · verify {v:.1f} ms · round {tt:.1f} ms", "起草 {d:.1f} 毫秒 · 验证 {v:.1f} 毫秒 · 本轮 {tt:.1f} 毫秒"),
    "dec.replayed": ("Replayed round {i}: identical trace: {same}", "重放第 {i} 轮：轨迹完全一致：{same}"),
    "dec.link": ("Share this round", "分享本轮"),
    "dec.link_help": ("The address bar now holds prompt, method, seed and round: copy it to reopen exactly this round.", "地址栏已包含提示词、方法、种子和轮次：复制它即可重新打开这一轮。"),
    "dec.no_steps": ("No draft tokens were tried this round (vanilla or empty draft).", "本轮没有检验草稿 token（普通解码或草稿为空）。"),
    "rule.greedy": ("greedy: accept while the draft equals the target's argmax", "贪心：草稿等于目标模型 argmax 时接受"),
    "rule.chain": ("chain rule: accept x with probability min(1, p/q); on rejection draw from norm(max(p−q, 0))", "链式接受规则：以 min(1, p/q) 的概率接受 x；拒绝时从 norm(max(p−q, 0)) 采样"),
    "rule.tree-deterministic": ("tree rule (deterministic children): accept x with probability p(x) of the current residual; on rejection zero it and renormalise", "树规则（确定性子节点）：以当前残差分布中 p(x) 的概率接受 x；拒绝时将其置零并重新归一化"),
    "rule.tree-sampled": ("tree rule (sampled children): min(1, p/q) with residual updates", "树规则（采样子节点）：min(1, p/q) 并更新残差"),
}
