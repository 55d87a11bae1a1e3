"""Strings of batched serving: the page "When speculation stops paying" (views/serving.py), its
figures (specviz/viz/batch.py) and their words (specviz/bench/results.py)."""

STRINGS: dict[str, tuple[str, str]] = {
    "nav.batch": ("When speculation stops paying", "推测解码何时不再划算"),
    "batch.title": ("When speculation stops paying", "推测解码何时不再划算"),
    "batch.intro": (
        "At B = 1 a pass over one token leaves most of the processor's arithmetic idle, and a draft tree's extra tokens ride on that spare compute "
        "for nearly nothing. A server that decodes many users at once (a batch of B) spends the same spare compute on the batch instead, so past "
        "some batch size, the **crossover**, it makes more tokens per second without drafting at all.",
        "批大小 B = 1 时，一次只处理一个 token 的前向让处理器的大部分算力闲置，草稿树的额外 token 几乎免费地搭上这部分富余算力。"
        "服务器同时为许多用户解码（一个大小为 B 的批次）时，这部分富余算力被整个批次用掉了，因此超过某个批大小（即**交叉点**）后，"
        "完全不起草反而每秒能产生更多 token。",
    ),
    # ---- the shipped measurement
    "batch.shipped_title": ("Measured: speed against the batch size", "实测：速度随批大小的变化"),
    "batch.none_shipped": (
        "No batched benchmark ships with this version yet, so no curve is drawn; none is made up. Measure one with "
        "`python -m specviz.bench --batch 1,2,4,8,16 --methods vanilla,eagle3,eagle3@paper --prompts FILE.jsonl --limit 16 --max-new-tokens 128 --out assets/results/batch_cpu.json`, "
        "or press *Run it here* below for a small one on this machine.",
        "此版本尚未附带批处理基准测试，因此不画曲线，也不会编造任何数字。可以用 "
        "`python -m specviz.bench --batch 1,2,4,8,16 --methods vanilla,eagle3,eagle3@paper --prompts FILE.jsonl --limit 16 --max-new-tokens 128 --out assets/results/batch_cpu.json` "
        "测量一次，或点击下面的「在本机运行」在本机做一次小规模测量。",
    ),
    "batch.no_gpu": (
        "No GPU batch curve has been measured yet, so only the CPU's is drawn; none is made up. On a CUDA machine, "
        "`python -m specviz.bench --batch 1,2,4,8,16 --methods vanilla,eagle3,eagle3@paper --device cuda --prompts FILE.jsonl --limit 16 --max-new-tokens 128 --out assets/results/batch_cuda.json` "
        "measures one; shipped in assets/results/, it is drawn here, dashed, beside the CPU's.",
        "尚未测得 GPU 上的批处理曲线，因此只画 CPU 的曲线，不会编造任何数字。在有 CUDA 的机器上运行 "
        "`python -m specviz.bench --batch 1,2,4,8,16 --methods vanilla,eagle3,eagle3@paper --device cuda --prompts FILE.jsonl --limit 16 --max-new-tokens 128 --out assets/results/batch_cuda.json` "
        "即可测得；放进 assets/results/ 后，它会以虚线画在 CPU 曲线旁边。",
    ),
    "batch.throughput_title": ("All users together: tokens per second", "所有用户合计：每秒 token 数"),
    "batch.per_user_title": ("One user: tokens per second", "单个用户：每秒 token 数"),
    "batch.per_user_note": (
        "Every user waits for the whole batch's pass, so what one user sees falls as B grows while the server's total rises.",
        "每位用户都要等待整个批次的前向，所以随着 B 增大，单个用户看到的速度下降，而服务器的总吞吐量上升。",
    ),
    "batch.ratio_title": ("Speculation against vanilla at the same batch size", "同一批大小下推测解码与普通解码之比"),
    "batch.table_title": ("The numbers", "具体数字"),
    "batch.cross_at": (
        "On {where}, {m} is ahead {ahead} ({last_tps:.0f} against vanilla's {last_base:.0f} tokens/s, all users together) "
        "and stops paying at **B = {at}**: {tps:.0f} against {base:.0f}.",
        "在 {where} 上，{m} {ahead}领先（所有用户合计每秒 {last_tps:.0f} 个 token，普通解码为 {last_base:.0f} 个），"
        "在 **B = {at}** 时不再划算：{tps:.0f} 对 {base:.0f}。",
    ),
    "batch.ahead_at": ("at B = {b}", "在 B = {b} 时"),
    "batch.ahead_upto": ("up to B = {b}", "在 B = {b} 及以下"),
    "batch.cross_tail": (" At B = {largest}: {big_tps:.0f} against {big_base:.0f} ({ratio:.2f}x).",
                         "到 B = {largest} 时：{big_tps:.0f} 对 {big_base:.0f}（{ratio:.2f} 倍）。"),
    "batch.cross_from_1": (
        "On {where}, {m} does not pay even at **B = 1**: {tps:.0f} tokens/s against vanilla's {base:.0f}. There a tree's extra tokens are not free "
        "to begin with (see *When extra tokens are free*), and a batch only takes away more of the spare compute.",
        "在 {where} 上，{m} 即使在 **B = 1** 时也不划算：每秒 {tps:.0f} 个 token，而普通解码为 {base:.0f} 个。"
        "在那里树的额外 token 本来就不免费（见「额外 token 何时免费」页面），批处理只会占用更多富余算力。",
    ),
    "batch.cross_never": (
        "On {where}, {m} stays ahead at every measured batch size up to B = {largest} ({tps:.0f} against vanilla's {base:.0f} tokens/s there): "
        "the crossover lies beyond the measured range.",
        "在 {where} 上，{m} 在测量的每个批大小（直到 B = {largest}）都领先（在该处每秒 {tps:.0f} 个 token，普通解码为 {base:.0f} 个）："
        "交叉点超出了测量范围。",
    ),
    "batch.cross_missing": (
        "This measurement has no {m} and vanilla at the same batch size, so no crossover can be stated.",
        "这次测量没有在同一批大小下同时测 {m} 和普通解码，因此无法给出交叉点。",
    ),
    "batch.cpu_threads": ("{cpu} ({n} threads)", "{cpu}（{n} 个线程）"),
    "batch.report_caption": (
        "From `{file}`: {where}, {date}; {n} prompts × {tokens} new tokens, {dtype}, T = {T}. Throughput counts every user's tokens per second of "
        "decoding (prefill apart); the per-user speed is one sequence's tokens over the time until it finished.",
        "数据来自 `{file}`：{where}，{date}；{n} 个提示词 × {tokens} 个新 token，{dtype}，T = {T}。吞吐量是解码阶段（不含预填充）"
        "所有用户每秒合计的 token 数；单个用户的速度是一条序列的 token 数除以它完成所用的时间。",
    ),
    "batch.tree_of": ("{m}: {tree}", "{m}：{tree}"),
    "batch.tree_none": ("no tree", "无草稿树"),
    "batch.tree_static": ("a static tree of {n} nodes", "{n} 个节点的静态树"),
    "batch.tree_dynamic": ("a dynamic tree of depth {d}, at most {n} nodes", "深度 {d}、最多 {n} 个节点的动态树"),
    "batch.tree_floor": (", paths kept above probability {p}", "，只保留概率高于 {p} 的路径"),
    "batch.tree_lookup": (", plus up to {n} tokens copied from the context (prompt lookup)",
                          "，另加最多 {n} 个从上下文复制的 token（提示词查找）"),
    "batch.tree_tuned": (" (tuned for the measuring machine)", "（为测量所用的机器调优）"),
    # ---- figures (specviz/viz/batch.py)
    "batch.m_paper": ("{m} (papers' tree)", "{m}（论文的树）"),
    "batch.m_tuned": ("{m} (tuned tree)", "{m}（调优的树）"),
    "batch.on_gpu": (" · GPU", " · GPU"),
    "batch.cross_mark": ("crossover: B = {b}", "交叉点：B = {b}"),
    "batch.cross_mark_gpu": ("GPU crossover: B = {b}", "GPU 交叉点：B = {b}"),
    "batch.ax_batch": ("batch size B (users decoded together)", "批大小 B（同时解码的用户数）"),
    "batch.ax_throughput": ("tokens/s, all users together", "所有用户合计 词元/秒"),
    "batch.ax_per_user": ("tokens/s one user sees", "单个用户看到的 词元/秒"),
    "batch.ax_ratio": ("throughput ÷ vanilla's throughput", "吞吐量 ÷ 普通解码的吞吐量"),
    "batch.break_even": ("break-even", "持平线"),
    "batch.col_b": ("B", "B"),
    "batch.col_method": ("method", "方法"),
    "batch.col_throughput": ("all users, tokens/s", "所有用户合计 词元/秒"),
    "batch.col_per_user": ("one user, tokens/s", "单个用户 词元/秒"),
    "batch.col_ratio": ("throughput vs vanilla", "吞吐量相对普通解码"),
    "batch.col_tau": ("tau", "tau"),
    "batch.col_rows": ("tokens in the shared pass", "共享前向中的 token 数"),
    "batch.col_pass_ms": ("shared pass, ms", "共享前向 毫秒"),
    "batch.col_same": ("identical to vanilla", "与普通解码相同"),
    "batch.yes": ("yes", "是"),
    "batch.no": ("no", "否"),
    "batch.user": ("User {n}", "用户 {n}"),
    "batch.mask_other_user": ("another user's token: never visible (each user has its own cache)", "另一位用户的 token：永不可见（每位用户有自己的缓存）"),
    "batch.mask_other_branch": ("another branch of the same tree: masked", "同一棵树的另一分支：屏蔽"),
    "batch.mask_user_sees": ("{user}: visible", "{user}：可见"),
    "batch.mask_rows": ("query token (user, #id token)", "查询 token（用户，#编号 token）"),
    "batch.mask_cols": ("key token: every token of the one pass", "键 token：这一次前向中的所有 token"),
    # ---- the recorded batched round
    "batch.round_title": ("One batched round, recorded", "录制的一轮批处理"),
    "batch.round_body": (
        "{n} users decode at once with {m} (small trees: depth {d}, {k} drafts each, so all of them fit on screen). Each user drafts its own tree; "
        "all {rows} tokens go through the target in **one** pass ({ms:.0f} ms on the recording machine), which reads the weights once for everyone. "
        "The mask keeps each tree to itself: a token sees its ancestors in its own tree, and its own user's answer so far in that user's cache, "
        "never another user's tokens. That one pass grows with the sum of the trees: in a big batch every drafted token competes with the other users' tokens.",
        "{n} 位用户同时用 {m} 解码（树很小：深度 {d}，每棵 {k} 个草稿，这样都能放进屏幕）。每位用户起草自己的树；"
        "全部 {rows} 个 token 在**一次**目标前向中处理（录制机器上 {ms:.0f} 毫秒），权重只为所有人读取一次。"
        "掩码让每棵树只看到自己：一个 token 能看到它在自己树中的祖先，以及它所属用户缓存中该用户已生成的回答，"
        "永远看不到其他用户的 token。这一次前向随所有树的大小之和增长：在大批次中，每个草稿 token 都在与其他用户的 token 争夺算力。",
    ),
    "batch.trees_title": ("Each user's tree", "每位用户的树"),
    "batch.tree_title": ("{user} · {c} tokens this round", "{user} · 本轮 {c} 个 token"),
    "batch.mask_title": ("The one pass's attention mask: block-diagonal", "这一次前向的注意力掩码：块对角"),
    "batch.user_prompt": ("**{user}**: “{prompt}”", "**{user}**：“{prompt}”"),
    "batch.round_caption": (
        "Recorded round {r} of the batch ({m}, greedy, fp32, {cpu}, {utc}); `python -m specviz.teaching.lesson_batch check` replays it and must get the identical rounds.",
        "批次的第 {r} 轮录制（{m}，贪心，fp32，{cpu}，{utc}）；`python -m specviz.teaching.lesson_batch check` 会重放它，并且必须得到完全相同的各轮。",
    ),
    "batch.round_missing": ("The recorded batched round is missing: run `python -m specviz.teaching.lesson_batch record`.",
                            "缺少录制的批处理轮次：请运行 `python -m specviz.teaching.lesson_batch record`。"),
    # ---- run it here
    "batch.live_title": ("Run it here", "在本机运行"),
    "batch.live_intro": (
        "A small batched measurement on this machine: built-in prompts × {tokens} new tokens at each chosen B, vanilla and EAGLE-3 with the sidebar's "
        "draft settings and temperature. It takes seconds to a minute on a small CPU and is noisier than the shipped curves above, which used more prompts "
        "and longer answers.",
        "在本机做一次小规模批处理测量：在每个选定的 B 下，用内置提示词各生成 {tokens} 个新 token，比较普通解码与 EAGLE-3（使用侧边栏的草稿设置和温度）。"
        "在小型 CPU 上需要几秒到一分钟，结果比上面随附的曲线噪声更大，后者用了更多提示词和更长的回答。",
    ),
    "batch.live_sizes": ("Batch sizes B", "批大小 B"),
    "batch.live_prompts": ("Built-in prompts", "内置提示词数"),
    "batch.live_button": ("Run it here", "在本机运行"),
    "batch.live_need_b": ("Choose at least one batch size.", "请至少选择一个批大小。"),
    "batch.live_result": ("Measured here", "本机实测"),
    "batch.trees_used": ("Draft trees: {trees}.", "草稿树：{trees}。"),
}
